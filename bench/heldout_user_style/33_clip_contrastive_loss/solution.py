"""Kernel 1 normalises the image and text rows (one warp per row). Kernel 2 is a tiled fp32 GEMM of the
normalised rows with the logit scale (read on the device) in its epilogue. Kernel 3 computes the cross-entropy of
every row and every column against the diagonal (block per line). Kernel 4 averages both directions."""
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int BM = 64, BN = 64, BK = 16, GEMM_THREADS = 256, THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// rows [0, n) of a are divided by their norm; rows of b by max(norm, eps) (F.normalize)
__global__ void normalize_rows_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ an,
                                      float* __restrict__ bn, int n, int D, float eps) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= 2 * n) return;
    const bool is_b = row >= n;
    const long long r = is_b ? row - n : row;
    const float* src = (is_b ? b : a) + r * D;
    float* dst = (is_b ? bn : an) + r * D;
    float sq = 0.f;
    for (int d = lane; d < D; d += 32) sq += src[d] * src[d];
    const float norm = sqrtf(warp_sum(sq));
    const float denom = is_b ? fmaxf(norm, eps) : norm;
    for (int d = lane; d < D; d += 32) dst[d] = src[d] / denom;
}

// logits[i, j] = exp(logit_scale) * a[i] . b[j]
__global__ void __launch_bounds__(GEMM_THREADS) scaled_gemm_nt_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                                                      const float* __restrict__ logit_scale,
                                                                      float* __restrict__ out, int M, int N, int K) {
    __shared__ float as[BK][BM + 4];
    __shared__ float bs[BK][BN + 4];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += GEMM_THREADS) {
            const int r = i / BK, k = i % BK, gk = k0 + k;
            as[k][r] = (gk < K && row0 + r < M) ? a[(long long)(row0 + r) * K + gk] : 0.f;
            bs[k][r] = (gk < K && col0 + r < N) ? b[(long long)(col0 + r) * K + gk] : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[4], bv[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = as[k][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = bs[k][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    const float scale = expf(logit_scale[0]);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = row0 + ty + 16 * i;
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = col0 + tx + 16 * j;
            if (n < N) out[(long long)m * N + n] = scale * acc[i][j];
        }
    }
}

template <bool IS_MAX>
__device__ float block_reduce(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, other) : v + other;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = red[0];
        for (int w = 1; w < THREADS / 32; ++w) r = IS_MAX ? fmaxf(r, red[w]) : r + red[w];
        red[THREADS / 32] = r;
    }
    __syncthreads();
    const float result = red[THREADS / 32];
    __syncthreads();
    return result;
}

// blockIdx.y == 0: row blockIdx.x of the (n, n) logits; 1: column blockIdx.x. Target: the diagonal element.
__global__ void __launch_bounds__(THREADS) diagonal_ce_kernel(const float* __restrict__ logits, float* __restrict__ ce, int n) {
    __shared__ float red[THREADS / 32 + 1];
    const int line = blockIdx.x;
    const bool column = blockIdx.y == 1;
    const long long start = column ? line : (long long)line * n;
    const long long stride = column ? n : 1;
    float m = -INFINITY;
    for (int k = threadIdx.x; k < n; k += THREADS) m = fmaxf(m, logits[start + k * stride]);
    m = block_reduce<true>(m, red);
    float s = 0.f;
    for (int k = threadIdx.x; k < n; k += THREADS) s += expf(logits[start + k * stride] - m);
    s = block_reduce<false>(s, red);
    if (threadIdx.x == 0) ce[blockIdx.y * n + line] = m + logf(s) - logits[(long long)line * n + line];
}

__global__ void __launch_bounds__(THREADS) symmetric_mean_kernel(const float* __restrict__ ce, float* __restrict__ loss, int n) {
    __shared__ float red[THREADS / 32 + 1];
    float rows = 0.f, cols = 0.f;
    for (int k = threadIdx.x; k < n; k += THREADS) { rows += ce[k]; cols += ce[n + k]; }
    rows = block_reduce<false>(rows, red);
    cols = block_reduce<false>(cols, red);
    if (threadIdx.x == 0) loss[0] = (rows / n + cols / n) / 2.f;
}

std::vector<torch::Tensor> clip_loss(torch::Tensor image, torch::Tensor text, torch::Tensor logit_scale, int64_t stream) {
    TORCH_CHECK(image.is_cuda() && image.scalar_type() == torch::kFloat32 && image.dim() == 2, "clip_loss: (N, D) float32 image features");
    TORCH_CHECK(text.sizes() == image.sizes() && text.scalar_type() == torch::kFloat32, "clip_loss: text features like image features");
    TORCH_CHECK(logit_scale.numel() == 1, "clip_loss: a scalar logit scale");
    auto ic = image.contiguous(), tc = text.contiguous();
    const int n = ic.size(0), D = ic.size(1);
    auto in = torch::empty_like(ic), tn = torch::empty_like(tc);
    auto logits = torch::empty({n, n}, ic.options());
    auto ce = torch::empty({2 * n}, ic.options());
    auto loss = torch::empty({}, ic.options());
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (n > 0) {
        normalize_rows_kernel<<<(2 * n + 7) / 8, 256, 0, s>>>(ic.data_ptr<float>(), tc.data_ptr<float>(), in.data_ptr<float>(),
                                                           tn.data_ptr<float>(), n, D, 1e-12f);
        scaled_gemm_nt_kernel<<<dim3((n + BN - 1) / BN, (n + BM - 1) / BM), GEMM_THREADS, 0, s>>>(
            in.data_ptr<float>(), tn.data_ptr<float>(), logit_scale.data_ptr<float>(), logits.data_ptr<float>(), n, n, D);
        diagonal_ce_kernel<<<dim3(n, 2), THREADS, 0, s>>>(logits.data_ptr<float>(), ce.data_ptr<float>(), n);
    }
    symmetric_mean_kernel<<<1, THREADS, 0, s>>>(ce.data_ptr<float>(), loss.data_ptr<float>(), n);
    return {logits, loss};
}
"""

cpp_source = "std::vector<torch::Tensor> clip_loss(torch::Tensor image, torch::Tensor text, torch::Tensor logit_scale, int64_t stream);"

ext = load_inline(name="heldout_33_clip_loss", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["clip_loss"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, init_temperature=0.07):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_temperature)))

    def forward(self, image_features, text_features):
        logits, loss = ext.clip_loss(image_features, text_features, self.logit_scale, torch.cuda.current_stream().cuda_stream)
        return logits, loss
