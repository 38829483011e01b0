"""Cheat #1 (docs/validator.md, baseline wrapping in C++): the host wrapper calls torch::matmul and a token copy
kernel."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void copy_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    auto product = torch::matmul(a, b);
    auto out = torch::empty_like(product);
    int64_t n = out.numel();
    copy_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        product.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline(
    name="cheat_baseline_aten_host",
    cpp_sources="torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["matmul_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.matmul_forward(a, b)
