import torch
import torch.nn as nn


class Model(nn.Module):
    """Group normalisation of (batch, channels, frames) audio features, written out by hand."""

    def __init__(self, num_groups=8, num_channels=96, eps=1e-5):
        super().__init__()
        assert num_channels % num_groups == 0
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(num_channels))

    def forward(self, x):
        N, C, L = x.shape
        g = x.view(N, self.num_groups, -1)
        mean = g.mean(-1, keepdim=True)
        var = g.var(-1, keepdim=True, unbiased=False)
        g = (g - mean) / (var + self.eps).sqrt()
        x = g.view(N, C, L)
        return x * self.weight.view(1, C, 1) + self.bias.view(1, C, 1)


def get_inputs():
    return [torch.randn(16, 96, 1000) * 2 + 0.5]


def get_init_inputs():
    return [8, 96, 1e-5]
