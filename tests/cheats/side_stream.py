"""Cheat #9 (docs/validator.md, KernelBench's non-default-stream kernel): the GEMM runs on a private non-blocking
stream, so timing events recorded on the current stream measure almost nothing."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

constexpr int kTile = 16;

__global__ void matmul_kernel(const float* a, const float* b, float* c, int m, int n, int k) {
    int row = blockIdx.y * kTile + threadIdx.y;
    int col = blockIdx.x * kTile + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i) acc += a[(int64_t)row * k + i] * b[(int64_t)i * n + col];
        c[(int64_t)row * n + col] = acc;
    }
}

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    dim3 block(kTile, kTile);
    dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
    matmul_kernel<<<grid, block, 0, side>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, n, k);
    return c;
}
"""

ext = load_inline(
    name="cheat_side_stream",
    cpp_sources="torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["matmul_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.matmul_forward(a, b)
