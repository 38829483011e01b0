"""Style: float16 rotary embedding, one thread per rotated pair, angles and sincosf in fp32 on the current stream."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rope_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

// q: (rows = batch * heads * seq, head_dim) contiguous; the position of a row is row % seq.
__global__ void rope_rotate_half_kernel(const __half* __restrict__ q, const float* __restrict__ inv_freq,
                                        __half* __restrict__ out, long long pairs, int seq, int half_dim) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += stride) {
        const long long row = p / half_dim;
        const int i = p % half_dim;
        const float angle = (float)(row % seq) * inv_freq[i];
        float sin_a, cos_a;
        sincosf(angle, &sin_a, &cos_a);
        const __half* src = q + row * 2 * half_dim;
        __half* dst = out + row * 2 * half_dim;
        const float x1 = __half2float(src[i]);
        const float x2 = __half2float(src[i + half_dim]);
        dst[i] = __float2half(x1 * cos_a - x2 * sin_a);
        dst[i + half_dim] = __float2half(x2 * cos_a + x1 * sin_a);
    }
}

torch::Tensor rope_forward(torch::Tensor q, torch::Tensor inv_freq) {
    TORCH_CHECK(q.dim() == 4 && q.scalar_type() == torch::kHalf, "rope_forward: (batch, heads, seq, dim) float16");
    auto input = q.contiguous();
    auto out = torch::empty_like(input);
    const int seq = input.size(2), half_dim = input.size(3) / 2;
    const long long pairs = input.numel() / 2;
    rope_rotate_half_kernel<<<8192, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const __half*>(input.data_ptr<at::Half>()), inv_freq.data_ptr<float>(),
        reinterpret_cast<__half*>(out.data_ptr<at::Half>()), pairs, seq, half_dim);
    return out;
}
"""

rope = load_inline(name="corpus_rope_half", cpp_sources="torch::Tensor rope_forward(torch::Tensor q, torch::Tensor inv_freq);",
                   cuda_sources=rope_source, functions=["rope_forward"])


class ModelNew(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q):
        return rope.rope_forward(q, self.inv_freq)
