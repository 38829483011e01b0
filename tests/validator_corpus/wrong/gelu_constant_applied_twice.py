"""Wrong: the pre-multiplied cubic coefficient 0.0356774 used inside the parentheses (sqrt(2/pi) twice)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.0356774f * v * v * v)));
    }
}

torch::Tensor gelu(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    long long n = input.numel();
    gelu_kernel<<<(n + 255) / 256, 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_gelu_constant", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["gelu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.gelu(x)
