import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Short causal depthwise convolution over time followed by SiLU, on (batch, time, channels) activations."""

    def __init__(self, channels: int = 256, kernel_size: int = 4):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1, bias=True)

    def forward(self, x):
        seq_len = x.shape[1]
        y = self.conv(x.transpose(1, 2))[..., :seq_len]
        return F.silu(y).transpose(1, 2)


def get_inputs():
    return [torch.randn(8, 1000, 256)]


def get_init_inputs():
    return [256, 4]
