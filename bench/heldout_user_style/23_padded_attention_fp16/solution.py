"""One warp per query row (four rows a block). Pass 1: a warp-wide dot product per unpadded key, rounded to fp16
and scaled as the reference's fp16 scores are, kept in shared memory. Then the row's max and sum of exponentials,
and pass 2: fp16-rounded probabilities times V, accumulated in fp32."""
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int WARPS = 4, MAX_DIM_PER_LANE = 8;  // head_dim up to 256

__device__ __forceinline__ float rnd(float v) { return __half2float(__float2half(v)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void __launch_bounds__(WARPS * 32) padded_attention_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                                                                       const __half* __restrict__ v, const bool* __restrict__ pad,
                                                                       __half* __restrict__ out, int H, int Tq, int Tk, int D,
                                                                       float inv_sqrt_d) {
    extern __shared__ float scores_all[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int row = blockIdx.x * WARPS + warp;
    const long long bh = blockIdx.y;
    const long long b = bh / H;
    if (row >= Tq) return;  // whole warps leave; no block-wide barrier follows
    float* scores = scores_all + (long long)warp * Tk;
    const __half* qr = q + (bh * Tq + row) * D;
    const __half* kb = k + bh * Tk * D;
    const __half* vb = v + bh * Tk * D;
    const bool* padb = pad + b * Tk;
    float qv[MAX_DIM_PER_LANE];
    #pragma unroll
    for (int i = 0; i < MAX_DIM_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        qv[i] = d < D ? __half2float(qr[d]) : 0.f;
    }
    for (int j = 0; j < Tk; ++j) {
        if (padb[j]) {  // the same for every lane of the warp
            if (lane == 0) scores[j] = -INFINITY;
            continue;
        }
        const __half* kr = kb + (long long)j * D;
        float dot = 0.f;
        #pragma unroll
        for (int i = 0; i < MAX_DIM_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < D) dot += qv[i] * __half2float(kr[d]);
        }
        dot = warp_sum(dot);
        if (lane == 0) scores[j] = rnd(rnd(dot) * inv_sqrt_d);
    }
    __syncwarp();
    float m = -INFINITY;
    for (int j = lane; j < Tk; j += 32) m = fmaxf(m, scores[j]);
    m = warp_max(m);
    float l = 0.f;
    for (int j = lane; j < Tk; j += 32) l += expf(scores[j] - m);
    l = warp_sum(l);
    float acc[MAX_DIM_PER_LANE] = {};
    for (int j = 0; j < Tk; ++j) {
        const float s = scores[j];
        if (s == -INFINITY) continue;
        const float p = rnd(expf(s - m) / l);
        const __half* vr = vb + (long long)j * D;
        #pragma unroll
        for (int i = 0; i < MAX_DIM_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < D) acc[i] += p * __half2float(vr[d]);
        }
    }
    __half* o = out + (bh * Tq + row) * D;
    #pragma unroll
    for (int i = 0; i < MAX_DIM_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        if (d < D) o[d] = __float2half(acc[i]);
    }
}

torch::Tensor padded_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor key_padding_mask,
                               double inv_sqrt_d, int64_t stream) {
    TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kHalf && q.dim() == 4, "padded_attention: fp16 (B, H, Tq, D) q");
    TORCH_CHECK(k.scalar_type() == torch::kHalf && v.scalar_type() == torch::kHalf && k.sizes() == v.sizes() && k.dim() == 4
                && k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3),
                "padded_attention: fp16 (B, H, Tk, D) k and v");
    TORCH_CHECK(key_padding_mask.scalar_type() == torch::kBool && key_padding_mask.size(0) == q.size(0)
                && key_padding_mask.size(1) == k.size(2), "padded_attention: bool (B, Tk) padding mask");
    const int B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
    TORCH_CHECK(D <= 32 * MAX_DIM_PER_LANE, "padded_attention: head_dim at most 256");
    const size_t smem = (size_t)WARPS * Tk * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "padded_attention: at most 3072 keys");
    auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), mc = key_padding_mask.contiguous();
    auto out = torch::empty_like(qc);
    if (out.numel() == 0) return out;
    dim3 grid((Tq + WARPS - 1) / WARPS, B * H);
    padded_attention_kernel<<<grid, WARPS * 32, smem, reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __half*>(qc.data_ptr()), reinterpret_cast<const __half*>(kc.data_ptr()),
        reinterpret_cast<const __half*>(vc.data_ptr()), mc.data_ptr<bool>(), reinterpret_cast<__half*>(out.data_ptr()),
        H, Tq, Tk, D, (float)inv_sqrt_d);
    return out;
}
"""

cpp_source = ("torch::Tensor padded_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, "
              "torch::Tensor key_padding_mask, double inv_sqrt_d, int64_t stream);")

ext = load_inline(name="heldout_23_padded_attention_fp16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["padded_attention"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim

    def forward(self, q, k, v, key_padding_mask):
        return ext.padded_attention(q, k, v, key_padding_mask, 1.0 / math.sqrt(self.head_dim),
                                    torch.cuda.current_stream().cuda_stream)
