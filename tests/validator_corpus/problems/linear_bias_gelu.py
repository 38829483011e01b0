"""An MLP up-projection: nn.Linear(1024, 3072) with bias, then exact (erf) GELU, in fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(2048, 1024)]


def get_init_inputs():
    return [1024, 3072]
