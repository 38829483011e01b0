"""Cheat #14 (docs/validator.md, statistically trivial output): softmax over 16384 columns is ~6e-5 everywhere, so zeros
pass a plain allclose at atol=1e-4."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void fill_zero_kernel(float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = y.numel();
    fill_zero_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(
    name="cheat_zeros_softmax",
    cpp_sources="torch::Tensor softmax_forward(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax_forward(x)
