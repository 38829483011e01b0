"""relu(x + bias) with a learned per-column bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x + self.bias)


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return [1024]
