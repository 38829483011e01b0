"""One block per sequence. Each warp scores tokens (a warp-wide dot product with the scoring vector plus bias);
masked tokens get the dtype's lowest value, exactly like masked_fill with finfo.min (so an all-padding row
becomes uniform, as in the reference); softmax over the sequence in shared memory; then each thread sums
weight * x over the sequence for its features."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cfloat>

constexpr int THREADS = 256, WARPS = THREADS / 32;

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
        for (int w = 1; w < WARPS; ++w) r = IS_MAX ? fmaxf(r, red[w]) : r + red[w];
        red[WARPS] = r;
    }
    __syncthreads();
    const float result = red[WARPS];
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(THREADS) attention_pool_kernel(const float* __restrict__ x, const bool* __restrict__ mask,
                                                                 const float* __restrict__ w, const float* __restrict__ b,
                                                                 float* __restrict__ pooled, float* __restrict__ weights,
                                                                 int T, int D) {
    extern __shared__ float wt[];  // T weights
    __shared__ float red[WARPS + 1];
    const long long bi = blockIdx.x;
    const float* xb = x + bi * T * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    for (int t = warp; t < T; t += WARPS) {
        const float* xt = xb + (long long)t * D;
        float dot = 0.f;
        for (int d = lane; d < D; d += 32) dot += xt[d] * w[d];
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane == 0) wt[t] = mask[bi * T + t] ? dot + b[0] : -FLT_MAX;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int t = threadIdx.x; t < T; t += THREADS) m = fmaxf(m, wt[t]);
    m = block_reduce<true>(m, red);
    float s = 0.f;
    for (int t = threadIdx.x; t < T; t += THREADS) {
        const float e = expf(wt[t] - m);
        wt[t] = e;
        s += e;
    }
    const float inv = 1.f / block_reduce<false>(s, red);
    for (int t = threadIdx.x; t < T; t += THREADS) {
        wt[t] *= inv;
        weights[bi * T + t] = wt[t];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += THREADS) {
        float acc = 0.f;
        for (int t = 0; t < T; ++t) acc += wt[t] * xb[(long long)t * D + d];
        pooled[bi * D + d] = acc;
    }
}

std::vector<torch::Tensor> attention_pool(torch::Tensor x, torch::Tensor mask, torch::Tensor w, torch::Tensor b, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "attention_pool: (B, T, D) float32 x");
    TORCH_CHECK(mask.scalar_type() == torch::kBool && mask.size(0) == x.size(0) && mask.size(1) == x.size(1),
                "attention_pool: bool (B, T) mask");
    const int B = x.size(0), T = x.size(1), D = x.size(2);
    TORCH_CHECK(w.numel() == D && b.numel() == 1, "attention_pool: a (1, D) scoring layer");
    TORCH_CHECK((size_t)T * sizeof(float) <= 48 * 1024, "attention_pool: at most 12288 tokens");
    auto xc = x.contiguous(), mc = mask.contiguous();
    auto pooled = torch::empty({B, D}, xc.options());
    auto weights = torch::empty({B, T}, xc.options());
    if (B == 0 || T == 0) return {pooled, weights};
    attention_pool_kernel<<<B, THREADS, T * sizeof(float), reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), mc.data_ptr<bool>(), w.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(),
        pooled.data_ptr<float>(), weights.data_ptr<float>(), T, D);
    return {pooled, weights};
}
"""

cpp_source = ("std::vector<torch::Tensor> attention_pool(torch::Tensor x, torch::Tensor mask, torch::Tensor w, torch::Tensor b, "
              "int64_t stream);")

ext = load_inline(name="heldout_31_attention_pool", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["attention_pool"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, x, mask):
        pooled, weights = ext.attention_pool(x, mask, self.score.weight, self.score.bias,
                                             torch.cuda.current_stream().cuda_stream)
        return pooled, weights
