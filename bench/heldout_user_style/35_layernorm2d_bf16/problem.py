import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm over the channels of an NCHW feature map (ConvNeXt-style), in bf16."""

    def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_channels, dtype=torch.bfloat16))
        self.bias = nn.Parameter(torch.zeros(num_channels, dtype=torch.bfloat16))
        with torch.no_grad():
            self.weight.normal_(1.0, 0.2)
            self.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(8, 96, 56, 56, dtype=torch.bfloat16)]


def get_init_inputs():
    return [96, 1e-6]
