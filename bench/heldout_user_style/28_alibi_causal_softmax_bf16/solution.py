"""One block per (batch, head, query) row: the visible keys' logits (score + slope * (key - query position)) are
built in fp32 in shared memory, then max, sum of exponentials and bf16 probabilities; hidden keys get exactly 0."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int THREADS = 128;

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

__global__ void __launch_bounds__(THREADS) alibi_softmax_kernel(const __nv_bfloat16* __restrict__ scores, const float* __restrict__ slopes,
                                                                __nv_bfloat16* __restrict__ probs, int H, int T, int S) {
    extern __shared__ float logits[];
    __shared__ float red[THREADS / 32 + 1];
    const long long row = blockIdx.x;  // (b, h, i)
    const int i = row % T;
    const int h = (row / T) % H;
    const int q_pos = i + (S - T);
    const float slope = slopes[h];
    const __nv_bfloat16* x = scores + row * S;
    __nv_bfloat16* out = probs + row * S;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < S && j <= q_pos; j += THREADS) {
        const float v = __bfloat162float(x[j]) + slope * (float)(j - q_pos);
        logits[j] = v;
        m = fmaxf(m, v);
    }
    m = block_reduce<true>(m, red);
    float s = 0.f;
    for (int j = threadIdx.x; j < S && j <= q_pos; j += THREADS) {
        const float e = expf(logits[j] - m);
        logits[j] = e;
        s += e;
    }
    const float inv = 1.f / block_reduce<false>(s, red);
    for (int j = threadIdx.x; j < S; j += THREADS) out[j] = __float2bfloat16(j <= q_pos ? logits[j] * inv : 0.f);
}

torch::Tensor alibi_softmax(torch::Tensor scores, torch::Tensor slopes, int64_t stream) {
    TORCH_CHECK(scores.is_cuda() && scores.scalar_type() == torch::kBFloat16 && scores.dim() == 4,
                "alibi_softmax: (B, H, T, S) bf16 scores");
    const int B = scores.size(0), H = scores.size(1), T = scores.size(2), S = scores.size(3);
    TORCH_CHECK(slopes.numel() == H && slopes.scalar_type() == torch::kFloat32, "alibi_softmax: one float32 slope per head");
    TORCH_CHECK(T <= S, "alibi_softmax: more queries than keys");
    TORCH_CHECK((size_t)S * sizeof(float) <= 48 * 1024, "alibi_softmax: at most 12288 keys");
    auto sc = scores.contiguous();
    auto probs = torch::empty_like(sc);
    const long long rows = (long long)B * H * T;
    if (rows == 0 || S == 0) return probs;
    alibi_softmax_kernel<<<(unsigned)rows, THREADS, S * sizeof(float), reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __nv_bfloat16*>(sc.data_ptr()), slopes.contiguous().data_ptr<float>(),
        reinterpret_cast<__nv_bfloat16*>(probs.data_ptr()), H, T, S);
    return probs;
}
"""

cpp_source = "torch::Tensor alibi_softmax(torch::Tensor scores, torch::Tensor slopes, int64_t stream);"

ext = load_inline(name="heldout_28_alibi_softmax_bf16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["alibi_softmax"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_heads: int = 8):
        super().__init__()
        self.register_buffer("slopes", torch.zeros(1, num_heads, 1, 1))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return ext.alibi_softmax(scores, self.slopes, torch.cuda.current_stream().cuda_stream)
