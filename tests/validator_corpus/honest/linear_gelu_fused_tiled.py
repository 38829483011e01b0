"""Style: GEMM against nn.Linear's (out, in) weight with the bias and erf-GELU fused into the epilogue."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4, THREADS = 256;

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// y[m, n] = gelu(sum_k x[m, k] * w[n, k] + bias[n])
__global__ void __launch_bounds__(THREADS) linear_gelu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                              const float* __restrict__ bias, float* __restrict__ y,
                                                              int M, int N, int K) {
    __shared__ float xs[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int m = e / BK, k = e % BK;
            xs[k][m] = (row0 + m < M && k0 + k < K) ? x[(long long)(row0 + m) * K + k0 + k] : 0.0f;
        }
        for (int e = tid; e < BN * BK; e += THREADS) {
            const int n = e / BK, k = e % BK;
            ws[k][n] = (col0 + n < N && k0 + k < K) ? w[(long long)(col0 + n) * K + k0 + k] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float a = xs[k][ty * TM + i];
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a, ws[k][tx * TN + j], acc[i][j]);
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx * TN + j;
            if (r < M && c < N) y[(long long)r * N + c] = gelu_erf(acc[i][j] + bias[c]);
        }
    }
}

torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    auto input = x.contiguous();
    auto w = weight.contiguous();
    const int M = input.size(0), K = input.size(1), N = w.size(0);
    TORCH_CHECK(w.size(1) == K && bias.numel() == N, "linear_gelu: weight (N, K) and bias (N,) expected");
    auto y = torch::empty({M, N}, input.options());
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    linear_gelu_kernel<<<grid, THREADS>>>(input.data_ptr<float>(), w.data_ptr<float>(), bias.contiguous().data_ptr<float>(),
                                          y.data_ptr<float>(), M, N, K);
    return y;
}
"""

ext = load_inline(name="corpus_linear_gelu_fused",
                  cpp_sources="torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);",
                  cuda_sources=cuda_source, functions=["linear_gelu"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds the weight and bias the kernel reads

    def forward(self, x):
        return ext.linear_gelu(x, self.linear.weight, self.linear.bias)
