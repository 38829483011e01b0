"""Attention head split: (batch, seq, heads*dim) -> (batch, heads, seq, dim), scaled by dim**-0.5, made contiguous."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        dim = width // self.heads
        return (x.view(batch, seq, self.heads, dim).transpose(1, 2) * dim ** -0.5).contiguous()


def get_inputs():
    return [torch.randn(4, 1024, 2048)]


def get_init_inputs():
    return [16]
