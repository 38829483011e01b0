"""fp32 C = A @ B with an output width (1000) that is not a multiple of any tile."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(1536, 2048), torch.rand(2048, 1000)]


def get_init_inputs():
    return []
