import torch
from torch import nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU feed-forward block: down(silu(gate(x)) * up(x))."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def get_inputs():
    return [torch.randn(2, 75, 384)]


def get_init_inputs():
    return [384, 1000, True]
