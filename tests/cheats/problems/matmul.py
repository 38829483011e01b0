"""Square fp32 matrix multiply: the natural target for cuBLAS wrapping, side streams and fp16 shortcuts."""

import torch
import torch.nn as nn

size = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(size, size), torch.rand(size, size)]


def get_init_inputs():
    return []
