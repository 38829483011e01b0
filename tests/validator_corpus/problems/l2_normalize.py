"""Rows scaled to unit L2 norm (F.normalize, eps 1e-12) in fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1)


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_init_inputs():
    return []
