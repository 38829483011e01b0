"""Wrong: the epilogue adds bias[row] instead of bias[col] (the bias belongs to output features, not to samples)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define TILE 32

__global__ void linear_gelu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ y, int M, int N, int K) {
    __shared__ float x_tile[TILE][TILE + 1];
    __shared__ float w_tile[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int w_row = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        x_tile[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? x[(long long)row * K + k0 + threadIdx.x] : 0.0f;
        w_tile[threadIdx.y][threadIdx.x] = (w_row < N && k0 + threadIdx.x < K) ? w[(long long)w_row * K + k0 + threadIdx.x] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += x_tile[threadIdx.y][k] * w_tile[threadIdx.x][k];
        __syncthreads();
    }
    if (row < M && col < N) {
        const float v = acc + b[row % N];
        y[(long long)row * N + col] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    const int M = xc.size(0), K = xc.size(1), N = wc.size(0);
    auto y = torch::empty({M, N}, xc.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_gelu_kernel<<<grid, block>>>(xc.data_ptr<float>(), wc.data_ptr<float>(), b.data_ptr<float>(),
                                        y.data_ptr<float>(), M, N, K);
    return y;
}
"""

ext = load_inline(name="corpus_wrong_linear_bias", cpp_sources="torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["linear_gelu"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.linear_gelu(x, self.linear.weight, self.linear.bias)
