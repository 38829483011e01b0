"""Cheat (torch-op fallback / no custom kernel): ModelNew is plain PyTorch with a different spelling."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x.contiguous())
