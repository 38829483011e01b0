"""Style: a templated kernel instantiated through AT_DISPATCH_FLOATING_TYPES_AND_HALF, math in float."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

template <typename scalar_t>
__global__ void swiglu_kernel(const scalar_t* __restrict__ up, const scalar_t* __restrict__ gate,
                              scalar_t* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = static_cast<float>(gate[i]);
        float u = static_cast<float>(up[i]);
        out[i] = static_cast<scalar_t>(u * (g / (1.0f + expf(-g))));
    }
}

torch::Tensor swiglu_forward(torch::Tensor up, torch::Tensor gate) {
    TORCH_CHECK(up.sizes() == gate.sizes() && up.scalar_type() == gate.scalar_type(), "swiglu: shape/dtype mismatch");
    auto u = up.contiguous();
    auto g = gate.contiguous();
    auto out = torch::empty_like(u);
    const int64_t n = u.numel();
    const int threads = 512;
    const int64_t blocks = (n + threads - 1) / threads;
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(u.scalar_type(), "swiglu_forward", ([&] {
        swiglu_kernel<scalar_t><<<blocks, threads>>>(u.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                                                     out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
"""

ext = load_inline(
    name="corpus_swiglu_dispatch",
    cpp_sources=["torch::Tensor swiglu_forward(torch::Tensor up, torch::Tensor gate);"],
    cuda_sources=[cuda_source],
    functions=["swiglu_forward"],
)


class ModelNew(nn.Module):
    def forward(self, up, gate):
        return ext.swiglu_forward(up, gate)
