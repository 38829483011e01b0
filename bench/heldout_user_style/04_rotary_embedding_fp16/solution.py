"""One thread per rotated pair (d, d + D/2) of one head row: the position's cos/sin rows are gathered from the
module's fp16 tables and each half is rounded to fp16 the way the reference rounds its products and sum."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float rnd(float v) { return __half2float(__float2half(v)); }

// x, out: (B, heads, T, D); pos: (B, T); cos/sin: (max_pos, D)
__global__ void rotary_kernel(const __half* __restrict__ x, const int64_t* __restrict__ pos,
                              const __half* __restrict__ cos_t, const __half* __restrict__ sin_t,
                              __half* __restrict__ out, long long pairs, int heads, int T, int D) {
    const int half_d = D / 2;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < pairs;
         p += (long long)gridDim.x * blockDim.x) {
        const int d = p % half_d;
        const long long row = p / half_d;          // (b, h, t)
        const int t = row % T;
        const long long b = row / ((long long)T * heads);
        const int64_t position = pos[b * T + t];
        const __half* c = cos_t + position * D;
        const __half* s = sin_t + position * D;
        const float x1 = __half2float(x[row * D + d]);
        const float x2 = __half2float(x[row * D + d + half_d]);
        // q * cos + rotate_half(q) * sin, with rotate_half(q) = (-x2, x1)
        const float lo = rnd(rnd(x1 * __half2float(c[d])) + rnd(-x2 * __half2float(s[d])));
        const float hi = rnd(rnd(x2 * __half2float(c[d + half_d])) + rnd(x1 * __half2float(s[d + half_d])));
        out[row * D + d] = __float2half(lo);
        out[row * D + d + half_d] = __float2half(hi);
    }
}

static void launch(const torch::Tensor& x, const torch::Tensor& pos, const torch::Tensor& cos_t,
                   const torch::Tensor& sin_t, torch::Tensor& out, cudaStream_t stream) {
    const int heads = x.size(1), T = x.size(2), D = x.size(3);
    const long long pairs = x.numel() / 2;
    if (pairs == 0) return;
    const int threads = 256;
    const int blocks = (int)std::min<long long>((pairs + threads - 1) / threads, 65535LL * 8);
    rotary_kernel<<<blocks, threads, 0, stream>>>(
        reinterpret_cast<const __half*>(x.data_ptr()), pos.data_ptr<int64_t>(),
        reinterpret_cast<const __half*>(cos_t.data_ptr()), reinterpret_cast<const __half*>(sin_t.data_ptr()),
        reinterpret_cast<__half*>(out.data_ptr()), pairs, heads, T, D);
}

std::vector<torch::Tensor> apply_rotary(torch::Tensor q, torch::Tensor k, torch::Tensor position_ids,
                                        torch::Tensor cos_t, torch::Tensor sin_t, int64_t stream) {
    TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kHalf && q.dim() == 4, "apply_rotary: q is fp16 (B, H, T, D)");
    TORCH_CHECK(k.scalar_type() == torch::kHalf && k.dim() == 4 && k.size(0) == q.size(0) && k.size(2) == q.size(2)
                && k.size(3) == q.size(3), "apply_rotary: k is fp16 (B, Hkv, T, D) like q");
    TORCH_CHECK(q.size(3) % 2 == 0 && cos_t.size(1) == q.size(3), "apply_rotary: even head_dim matching the tables");
    TORCH_CHECK(position_ids.scalar_type() == torch::kLong && position_ids.size(0) == q.size(0)
                && position_ids.size(1) == q.size(2), "apply_rotary: position_ids is int64 (B, T)");
    auto qc = q.contiguous(), kc = k.contiguous(), pc = position_ids.contiguous();
    auto ct = cos_t.contiguous(), st = sin_t.contiguous();
    auto q_out = torch::empty_like(qc), k_out = torch::empty_like(kc);
    auto s = reinterpret_cast<cudaStream_t>(stream);
    launch(qc, pc, ct, st, q_out, s);
    launch(kc, pc, ct, st, k_out, s);
    return {q_out, k_out};
}
"""

cpp_source = ("std::vector<torch::Tensor> apply_rotary(torch::Tensor q, torch::Tensor k, torch::Tensor position_ids, "
              "torch::Tensor cos_t, torch::Tensor sin_t, int64_t stream);")

ext = load_inline(name="heldout_04_rotary_fp16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["apply_rotary"], extra_cuda_cflags=["-O3"])


class RotaryEmbedding(nn.Module):
    """The same fp16 cos/sin tables as the reference (built once at construction, on the same device)."""

    def __init__(self, dim, max_position_embeddings=4096, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_position_embeddings).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().half(), persistent=False)
        self.register_buffer("sin_cached", emb.sin().half(), persistent=False)


class ModelNew(nn.Module):
    def __init__(self, head_dim=128, max_positions=4096):
        super().__init__()
        self.rotary = RotaryEmbedding(head_dim, max_positions)

    def forward(self, q, k, position_ids):
        stream = torch.cuda.current_stream().cuda_stream
        q_embed, k_embed = ext.apply_rotary(q, k, position_ids, self.rotary.cos_cached, self.rotary.sin_cached, stream)
        return q_embed, k_embed
