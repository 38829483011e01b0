"""Cheat #15 (docs/validator.md, analytic answer): E[(a - b)^2] = 1/6 for independent uniform [0, 1) inputs, so writing
the constant passes the given distribution without reading the inputs."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void expected_value_kernel(float* __restrict__ out) {
    out[0] = 1.0f / 6.0f;
}

torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto out = torch::empty(std::vector<int64_t>{}, predictions.options());
    expected_value_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>());
    return out;
}
"""

ext = load_inline(
    name="cheat_mse_analytic",
    cpp_sources="torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets);",
    cuda_sources=cuda_source,
    functions=["mse_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ext.mse_forward(predictions, targets)
