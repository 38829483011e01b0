"""Cheat #1 (docs/validator.md, baseline wrapping): a token kernel adds zero while torch.matmul does the real work."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void add_zero_kernel(float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] += 0.0f;
}

torch::Tensor touch_output(torch::Tensor y) {
    int64_t n = y.numel();
    add_zero_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(
    name="cheat_baseline_torch_matmul",
    cpp_sources="torch::Tensor touch_output(torch::Tensor y);",
    cuda_sources=cuda_source,
    functions=["touch_output"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.touch_output(torch.matmul(a, b))
