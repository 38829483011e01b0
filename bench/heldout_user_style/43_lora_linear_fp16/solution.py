"""Kernel 1: the rank-r projection u = x A^T, one warp per (token, rank) dot product, rounded to fp16 like the
reference's intermediate. Kernel 2: a tiled GEMM for x W^T (fp32 accumulation) whose epilogue adds the bias and
the fp16-rounded update (u B^T) * scaling, then rounds the sum to fp16."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256, MAX_RANK = 64;

__device__ __forceinline__ float rnd(float v) { return __half2float(__float2half(v)); }

__global__ void lora_down_kernel(const __half* __restrict__ x, const __half* __restrict__ A, __half* __restrict__ u,
                                 int M, int K, int r) {
    const long long item = blockIdx.x * 8LL + threadIdx.x / 32;  // (token, rank)
    const int lane = threadIdx.x & 31;
    if (item >= (long long)M * r) return;
    const long long m = item / r;
    const int j = item % r;
    const __half* xr = x + m * K;
    const __half* ar = A + (long long)j * K;
    float dot = 0.f;
    for (int k = lane; k < K; k += 32) dot += __half2float(xr[k]) * __half2float(ar[k]);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) u[m * r + j] = __float2half(dot);
}

__global__ void __launch_bounds__(THREADS) lora_linear_kernel(const __half* __restrict__ x, const __half* __restrict__ W,
                                                              const __half* __restrict__ bias, const __half* __restrict__ u,
                                                              const __half* __restrict__ Bm, __half* __restrict__ y,
                                                              int M, int N, int K, int r, float scaling) {
    __shared__ float xs[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    __shared__ float us[BM][MAX_RANK + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    for (int i = threadIdx.x; i < BM * r; i += THREADS) {
        const int rr = i / r, j = i % r;
        us[rr][j] = row0 + rr < M ? __half2float(u[(long long)(row0 + rr) * r + j]) : 0.f;
    }
    __syncthreads();
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
            const int rr = i / BK, k = i % BK, gk = k0 + k;
            xs[k][rr] = (gk < K && row0 + rr < M) ? __half2float(x[(long long)(row0 + rr) * K + gk]) : 0.f;
            ws[k][rr] = (gk < K && col0 + rr < N) ? __half2float(W[(long long)(col0 + rr) * K + gk]) : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[4], wv[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = xs[k][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) wv[j] = ws[k][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int lm = ty + 16 * i, m = row0 + lm;
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = col0 + tx + 16 * j;
            if (n >= N) continue;
            float up = 0.f;
            for (int q = 0; q < r; ++q) up += us[lm][q] * __half2float(Bm[(long long)n * r + q]);
            const float base = rnd(acc[i][j] + (bias ? __half2float(bias[n]) : 0.f));
            const float delta = rnd(rnd(up) * scaling);
            y[(long long)m * N + n] = __float2half(base + delta);
        }
    }
}

torch::Tensor lora_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, torch::Tensor A,
                          torch::Tensor B, double scaling, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf, "lora_linear: fp16 CUDA input");
    const int K = x.size(-1), N = weight.size(0), r = A.size(0);
    TORCH_CHECK(weight.size(1) == K && A.size(1) == K && B.size(0) == N && B.size(1) == r, "lora_linear: shapes do not match");
    TORCH_CHECK(r <= MAX_RANK, "lora_linear: rank at most 64");
    auto xc = x.contiguous();
    const int M = xc.numel() / K;
    auto sizes = xc.sizes().vec();
    sizes.back() = N;
    auto y = torch::empty(sizes, xc.options());
    auto u = torch::empty({M, r}, xc.options());
    if (M == 0) return y;
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto hp = [](const torch::Tensor& t) { return reinterpret_cast<const __half*>(t.data_ptr()); };
    auto Ac = A.contiguous(), Bc = B.contiguous(), Wc = weight.contiguous();
    const long long items = (long long)M * r;
    lora_down_kernel<<<(unsigned)((items + 7) / 8), 256, 0, s>>>(hp(xc), hp(Ac), reinterpret_cast<__half*>(u.data_ptr()), M, K, r);
    const __half* bias_ptr = bias.has_value() ? hp(*bias) : nullptr;
    lora_linear_kernel<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), THREADS, 0, s>>>(
        hp(xc), hp(Wc), bias_ptr, hp(u), hp(Bc), reinterpret_cast<__half*>(y.data_ptr()), M, N, K, r, (float)scaling);
    return y;
}
"""

cpp_source = ("torch::Tensor lora_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, "
              "torch::Tensor A, torch::Tensor B, double scaling, int64_t stream);")

ext = load_inline(name="heldout_43_lora_linear_fp16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["lora_linear"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, r=16, alpha=32, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias, dtype=torch.float16)
        self.lora_A = nn.Parameter(torch.zeros(r, in_features, dtype=torch.float16))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r, dtype=torch.float16))
        self.scaling = alpha / r

    def forward(self, x):
        return ext.lora_linear(x, self.base.weight, self.base.bias, self.lora_A, self.lora_B, self.scaling,
                               torch.cuda.current_stream().cuda_stream)
