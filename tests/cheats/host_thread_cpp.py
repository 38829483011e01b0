"""Cheat #10 (docs/validator.md, C++ side): the host wrapper returns at once and a detached std::thread launches the
kernel."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <thread>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    std::thread([in, out, n]() { relu_kernel<<<(n + 255) / 256, 256>>>(in, out, n); }).detach();
    return y;
}
"""

ext = load_inline(
    name="cheat_host_thread_cpp",
    cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["relu_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
