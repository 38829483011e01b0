"""Cheat #13 (docs/validator.md, precision downgrade): an fp32 GEMM whose tiles are rounded to fp16 before
multiplying."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

constexpr int kTile = 32;

__global__ void half_tile_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ c, int m, int n, int k) {
    __shared__ __half a_tile[kTile][kTile];
    __shared__ __half b_tile[kTile][kTile];
    int row = blockIdx.y * kTile + threadIdx.y;
    int col = blockIdx.x * kTile + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += kTile) {
        a_tile[threadIdx.y][threadIdx.x] = __float2half(
            (row < m && t + threadIdx.x < k) ? a[(int64_t)row * k + t + threadIdx.x] : 0.0f);
        b_tile[threadIdx.y][threadIdx.x] = __float2half(
            (col < n && t + threadIdx.y < k) ? b[(int64_t)(t + threadIdx.y) * n + col] : 0.0f);
        __syncthreads();
        for (int i = 0; i < kTile; ++i) acc += __half2float(__hmul(a_tile[threadIdx.y][i], b_tile[i][threadIdx.x]));
        __syncthreads();
    }
    if (row < m && col < n) c[(int64_t)row * n + col] = acc;
}

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    auto lhs = a.contiguous();
    auto rhs = b.contiguous();
    int m = lhs.size(0), k = lhs.size(1), n = rhs.size(1);
    auto out = torch::empty({m, n}, lhs.options());
    dim3 block(kTile, kTile);
    dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
    half_tile_matmul_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        lhs.data_ptr<float>(), rhs.data_ptr<float>(), out.data_ptr<float>(), m, n, k);
    return out;
}
"""

ext = load_inline(
    name="cheat_fp16_downgrade",
    cpp_sources="torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["matmul_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.matmul_forward(a, b)
