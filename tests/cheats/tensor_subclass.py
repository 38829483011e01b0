"""Cheat #11 (docs/validator.md, lazy evaluation): forward returns a Tensor subclass that only computes when
compared."""


import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(
    name="cheat_tensor_subclass",
    cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["relu_forward"],
)


class LazyResult(torch.Tensor):
    @staticmethod
    def __new__(cls, source):
        lazy = torch.Tensor._make_subclass(cls, torch.empty_like(source))
        lazy.source = source
        return lazy

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        args = [ext.relu_forward(a.source) if isinstance(a, LazyResult) else a for a in args]
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LazyResult(x)
