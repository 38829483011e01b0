"""Style: two load_inline calls in one file (a cos/sin table extension and a rotation extension), two launches."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

table_cuda = r"""
__global__ void rope_table_kernel(const float* __restrict__ inv_freq, float* __restrict__ cos_t,
                                  float* __restrict__ sin_t, int seq, int half_dim) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < seq * half_dim) {
        const float angle = (float)(i / half_dim) * inv_freq[i % half_dim];
        sincosf(angle, &sin_t[i], &cos_t[i]);
    }
}

std::vector<torch::Tensor> rope_table(torch::Tensor inv_freq, int64_t seq) {
    const int half_dim = inv_freq.numel();
    auto cos_t = torch::empty({seq, half_dim}, inv_freq.options());
    auto sin_t = torch::empty({seq, half_dim}, inv_freq.options());
    const int n = seq * half_dim;
    rope_table_kernel<<<(n + 255) / 256, 256>>>(inv_freq.data_ptr<float>(), cos_t.data_ptr<float>(),
                                                sin_t.data_ptr<float>(), (int)seq, half_dim);
    return {cos_t, sin_t};
}
"""

apply_cuda = r"""
#include <cuda_fp16.h>

__global__ void rope_apply_kernel(const __half* __restrict__ q, const float* __restrict__ cos_t,
                                  const float* __restrict__ sin_t, __half* __restrict__ out, long long pairs,
                                  int seq, int half_dim) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const long long row = p / half_dim;
    const int i = p % half_dim;
    const long long t = (row % seq) * half_dim + i;
    const long long base = row * 2 * half_dim;
    const float x1 = __half2float(q[base + i]), x2 = __half2float(q[base + i + half_dim]);
    out[base + i] = __float2half(x1 * cos_t[t] - x2 * sin_t[t]);
    out[base + i + half_dim] = __float2half(x2 * cos_t[t] + x1 * sin_t[t]);
}

torch::Tensor rope_apply(torch::Tensor q, torch::Tensor cos_t, torch::Tensor sin_t) {
    auto input = q.contiguous();
    auto out = torch::empty_like(input);
    const long long pairs = input.numel() / 2;
    rope_apply_kernel<<<(pairs + 255) / 256, 256>>>(reinterpret_cast<const __half*>(input.data_ptr<at::Half>()),
                                                    cos_t.data_ptr<float>(), sin_t.data_ptr<float>(),
                                                    reinterpret_cast<__half*>(out.data_ptr<at::Half>()), pairs,
                                                    input.size(2), input.size(3) / 2);
    return out;
}
"""

table_ext = load_inline(name="corpus_rope_table", cpp_sources="std::vector<torch::Tensor> rope_table(torch::Tensor inv_freq, int64_t seq);",
                        cuda_sources=table_cuda, functions=["rope_table"])
apply_ext = load_inline(name="corpus_rope_apply",
                        cpp_sources="torch::Tensor rope_apply(torch::Tensor q, torch::Tensor cos_t, torch::Tensor sin_t);",
                        cuda_sources=apply_cuda, functions=["rope_apply"])


class ModelNew(nn.Module):
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q):
        cos_t, sin_t = table_ext.rope_table(self.inv_freq, q.shape[2])
        return apply_ext.rope_apply(q, cos_t, sin_t)
