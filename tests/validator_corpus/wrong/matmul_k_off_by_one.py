"""Wrong: the tile load's K bound is `< K - 1`, so the last column of A / row of B never enters the product."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define TILE 32

__global__ void tiled_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int M, int N, int K) {
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        a_tile[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K - 1) ? a[(long long)row * K + t + threadIdx.x] : 0.0f;
        b_tile[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K - 1) ? b[(long long)(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i) acc += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[(long long)row * N + col] = acc;
}

torch::Tensor gemm(torch::Tensor a, torch::Tensor b) {
    auto A = a.contiguous();
    auto B = b.contiguous();
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    tiled_gemm<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    return C;
}
"""

ext = load_inline(name="corpus_wrong_matmul_k", cpp_sources="torch::Tensor gemm(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["gemm"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.gemm(a, b)
