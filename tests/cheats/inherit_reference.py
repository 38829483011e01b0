"""Cheat #3 (docs/validator.md, inheritance bypass): ModelNew inherits the reference and changes nothing."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


class ModelNew(Model):
    pass
