"""Wrong: rotates adjacent pairs (2i, 2i+1), the interleaved GPT-J layout, where the reference rotates halves (i, i+d/2)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>

__global__ void rope_interleaved_kernel(const __half* __restrict__ q, const float* __restrict__ inv_freq,
                                        __half* __restrict__ out, long long pairs, int seq, int half_dim) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const long long row = p / half_dim;
    const int i = p % half_dim;
    float sin_a, cos_a;
    sincosf((float)(row % seq) * inv_freq[i], &sin_a, &cos_a);
    const long long base = row * 2 * half_dim;
    const float x1 = __half2float(q[base + 2 * i]), x2 = __half2float(q[base + 2 * i + 1]);
    out[base + 2 * i] = __float2half(x1 * cos_a - x2 * sin_a);
    out[base + 2 * i + 1] = __float2half(x2 * cos_a + x1 * sin_a);
}

torch::Tensor rope(torch::Tensor q, torch::Tensor inv_freq) {
    auto input = q.contiguous();
    auto out = torch::empty_like(input);
    const long long pairs = input.numel() / 2;
    rope_interleaved_kernel<<<(pairs + 255) / 256, 256>>>(reinterpret_cast<const __half*>(input.data_ptr<at::Half>()),
                                                          inv_freq.data_ptr<float>(),
                                                          reinterpret_cast<__half*>(out.data_ptr<at::Half>()), pairs,
                                                          input.size(2), input.size(3) / 2);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_rope_pairs", cpp_sources="torch::Tensor rope(torch::Tensor q, torch::Tensor inv_freq);",
                  cuda_sources=cuda_source, functions=["rope"])


class ModelNew(nn.Module):
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q):
        return ext.rope(q, self.inv_freq)
