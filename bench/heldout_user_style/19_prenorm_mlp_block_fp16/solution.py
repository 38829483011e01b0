"""Inference (eval) path of the block; dropout is the identity there. Kernel 1: LayerNorm, one block per token,
fp32 statistics, fp16 output. Kernel 2 (twice): a tiled GEMM with fp32 accumulation whose epilogue adds the bias
and applies the tanh GELU (fc1) or adds the residual (fc2), rounding to fp16 where the reference rounds."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256;
constexpr int EPI_GELU = 0, EPI_RESIDUAL = 1;

__device__ __forceinline__ float rnd(float v) { return __half2float(__float2half(v)); }

__device__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) r += red[w];
        red[32] = r;
    }
    __syncthreads();
    const float result = red[32];
    __syncthreads();
    return result;
}

__global__ void layer_norm_kernel(const __half* __restrict__ x, const __half* __restrict__ w, const __half* __restrict__ b,
                                  __half* __restrict__ y, int D, float eps) {
    __shared__ float red[33];
    const __half* xr = x + (long long)blockIdx.x * D;
    __half* yr = y + (long long)blockIdx.x * D;
    float s = 0.f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) s += __half2float(xr[i]);
    const float mean = block_sum(s, red) / D;
    float sq = 0.f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float d = __half2float(xr[i]) - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(block_sum(sq, red) / D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = __float2half((__half2float(xr[i]) - mean) * rstd * __half2float(w[i]) + __half2float(b[i]));
}

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k_beta = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * v * (1.f + tanhf(k_beta * (v + 0.044715f * v * v * v)));
}

// C[m, n] = epilogue(A[m] . W[n] + bias[n]); A (M, K), W (N, K) as nn.Linear stores it.
template <int EPI>
__global__ void __launch_bounds__(THREADS) linear_kernel(const __half* __restrict__ A, const __half* __restrict__ W,
                                                         const __half* __restrict__ bias, const __half* __restrict__ residual,
                                                         __half* __restrict__ C, int M, int N, int K) {
    __shared__ float as[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
            const int r = i / BK, k = i % BK, gk = k0 + k;
            as[k][r] = (gk < K && row0 + r < M) ? __half2float(A[(long long)(row0 + r) * K + gk]) : 0.f;
            ws[k][r] = (gk < K && col0 + r < N) ? __half2float(W[(long long)(col0 + r) * K + gk]) : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[4], wv[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = as[k][ty + 16 * i];
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
        const int m = row0 + ty + 16 * i;
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = col0 + tx + 16 * j;
            if (n >= N) continue;
            const long long o = (long long)m * N + n;
            const float v = rnd(acc[i][j] + __half2float(bias[n]));
            C[o] = __float2half(EPI == EPI_GELU ? gelu_tanh(v) : v + __half2float(residual[o]));
        }
    }
}

torch::Tensor prenorm_mlp(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps, torch::Tensor w1,
                          torch::Tensor b1, torch::Tensor w2, torch::Tensor b2, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf, "prenorm_mlp: fp16 CUDA input");
    const int D = x.size(-1), H = w1.size(0);
    TORCH_CHECK(w1.size(1) == D && w2.size(0) == D && w2.size(1) == H && b1.numel() == H && b2.numel() == D
                && ln_w.numel() == D && ln_b.numel() == D, "prenorm_mlp: parameter shapes do not match the input");
    TORCH_CHECK(w1.scalar_type() == torch::kHalf && w2.scalar_type() == torch::kHalf && ln_w.scalar_type() == torch::kHalf,
                "prenorm_mlp: fp16 parameters");
    auto xc = x.contiguous();
    const int M = xc.numel() / D;
    auto normed = torch::empty_like(xc);
    auto hidden = torch::empty({M, H}, xc.options());
    auto out = torch::empty_like(xc);
    if (M == 0) return out;
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto hp = [](const torch::Tensor& t) { return reinterpret_cast<const __half*>(t.data_ptr()); };
    layer_norm_kernel<<<M, 128, 0, s>>>(hp(xc), hp(ln_w), hp(ln_b), reinterpret_cast<__half*>(normed.data_ptr()), D, (float)eps);
    linear_kernel<EPI_GELU><<<dim3((H + BN - 1) / BN, (M + BM - 1) / BM), THREADS, 0, s>>>(
        hp(normed), hp(w1), hp(b1), nullptr, reinterpret_cast<__half*>(hidden.data_ptr()), M, H, D);
    linear_kernel<EPI_RESIDUAL><<<dim3((D + BN - 1) / BN, (M + BM - 1) / BM), THREADS, 0, s>>>(
        hp(hidden), hp(w2), hp(b2), hp(xc), reinterpret_cast<__half*>(out.data_ptr()), M, D, H);
    return out;
}
"""

cpp_source = ("torch::Tensor prenorm_mlp(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps, "
              "torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2, int64_t stream);")

ext = load_inline(name="heldout_19_prenorm_mlp_fp16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["prenorm_mlp"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim=384, mlp_ratio=4.0, dropout=0.1):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.half()

    def forward(self, x):
        return ext.prenorm_mlp(x, self.norm.weight, self.norm.bias, self.norm.eps, self.fc1.weight, self.fc1.bias,
                               self.fc2.weight, self.fc2.bias, torch.cuda.current_stream().cuda_stream)
