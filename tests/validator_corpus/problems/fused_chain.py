"""A chain of elementwise ops on two fp32 inputs: relu(1.5 x + y) - 0.25 sigmoid(y)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 1.5 + y) - 0.25 * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(8192, 2049), torch.randn(8192, 2049)]


def get_init_inputs():
    return []
