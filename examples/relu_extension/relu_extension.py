"""Builds relu_kernel.cu with torch.utils.cpp_extension.load; Model is the reference the validator checks against."""

from pathlib import Path

import torch
from torch import nn
from torch.utils.cpp_extension import load

leaky = load(name="leaky_relu_ext", sources=[str(Path(__file__).with_name("relu_kernel.cu"))], verbose=False)


class Model(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.slope)


class ModelNew(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x):
        return leaky.leaky_relu_cuda(x.contiguous(), self.slope)


def get_inputs():
    return [torch.randn(8192, 2048)]


def get_init_inputs():
    return [0.01]
