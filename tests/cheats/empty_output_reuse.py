"""Cheat #5 (docs/validator.md, KernelBench's result-reuse kernel): returns torch::empty_like without writing it, hoping
the allocator hands back the reference's freed output buffer. A kernel is launched, but it never stores anything."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void never_writes_kernel(float* __restrict__ y, int64_t n) {
    if (n < 0) y[0] = 0.0f;
}

torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    never_writes_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), y.numel());
    return y;
}
"""

ext = load_inline(
    name="cheat_empty_output_reuse",
    cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["relu_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
