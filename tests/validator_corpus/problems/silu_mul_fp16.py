"""SwiGLU gate of an LLM MLP in float16: silu(gate) * up."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, up: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(2048, 11008, dtype=torch.float16), torch.randn(2048, 11008, dtype=torch.float16)]


def get_init_inputs():
    return []
