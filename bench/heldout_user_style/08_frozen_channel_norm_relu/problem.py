import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Batch norm with frozen statistics followed by ReLU, as used after a pretrained conv backbone."""

    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("running_mean", torch.randn(channels) * 0.5)
        self.register_buffer("running_var", torch.rand(channels) * 2 + 0.1)
        self.register_buffer("weight", torch.randn(channels) * 0.2 + 1.0)
        self.register_buffer("bias", torch.randn(channels) * 0.1)

    def forward(self, x):
        inv_std = torch.rsqrt(self.running_var + self.eps)
        x = (x - self.running_mean[None, :, None, None]) * inv_std[None, :, None, None]
        x = x * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return F.relu(x)


def get_inputs():
    return [torch.randn(6, 96, 35, 35)]


def get_init_inputs():
    return [96]
