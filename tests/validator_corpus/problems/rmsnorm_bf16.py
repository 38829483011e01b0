"""RMSNorm of a bfloat16 hidden state as LLMs compute it: statistics in float32, fp32 weight, bfloat16 out."""

import torch
import torch.nn as nn

HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden).normal_(1.0, 0.1))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv_rms * self.weight).to(x.dtype)


def get_inputs():
    return [torch.randn(4096, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN]
