"""Wrong: forward passes the permuted view straight to a kernel that indexes data_ptr() as if it were contiguous."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void scale_copy_kernel(const float* __restrict__ x, float* __restrict__ out, long long n, float scale) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = x[i] * scale;
}

torch::Tensor scaled_copy(torch::Tensor view, double scale) {
    auto out = torch::empty(view.sizes(), view.options());
    scale_copy_kernel<<<4096, 256>>>(view.data_ptr<float>(), out.data_ptr<float>(), out.numel(), (float)scale);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_head_strides", cpp_sources="torch::Tensor scaled_copy(torch::Tensor view, double scale);",
                  cuda_sources=cuda_source, functions=["scaled_copy"])


class ModelNew(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, x):
        batch, seq, width = x.shape
        dim = width // self.heads
        return ext.scaled_copy(x.view(batch, seq, self.heads, dim).transpose(1, 2), dim ** -0.5)
