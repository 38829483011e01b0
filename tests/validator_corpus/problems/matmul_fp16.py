"""float16 GEMM of activations (2048 x 1024) by a weight-scaled matrix (1024 x 2048)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(2048, 1024, dtype=torch.float16), (torch.randn(1024, 2048) / 32).to(torch.float16)]


def get_init_inputs():
    return []
