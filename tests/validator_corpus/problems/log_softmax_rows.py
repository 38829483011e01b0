"""Log-softmax over wide fp32 rows (8191 classes)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [torch.randn(2048, 8191)]


def get_init_inputs():
    return []
