"""LayerNorm over a 1536-wide hidden state with learned (randomly initialised) scale and shift."""

import torch
import torch.nn as nn

HIDDEN = 1536


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():  # not the identity affine, so a kernel that ignores it is wrong
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(8192, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
