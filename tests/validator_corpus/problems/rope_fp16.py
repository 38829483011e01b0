"""Rotary position embedding (rotate-half layout) of float16 queries (batch, heads, seq, head_dim), angles in fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(q.shape[2], device=q.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)
        cos, sin = torch.cat([angles.cos()] * 2, dim=-1), torch.cat([angles.sin()] * 2, dim=-1)
        qf = q.float()
        half = qf.shape[-1] // 2
        rotated = torch.cat([-qf[..., half:], qf[..., :half]], dim=-1)
        return (qf * cos + rotated * sin).to(q.dtype)


def get_inputs():
    return [torch.randn(2, 16, 2048, 128, dtype=torch.float16)]


def get_init_inputs():
    return [128]
