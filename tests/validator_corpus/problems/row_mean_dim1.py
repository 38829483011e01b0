"""Mean over the middle axis of a (batch, 1024, 1024) fp32 tensor: a reduction across rows, not along them."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


def get_inputs():
    return [torch.randn(32, 1024, 1024)]


def get_init_inputs():
    return []
