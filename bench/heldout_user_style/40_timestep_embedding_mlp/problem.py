import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Diffusion timestep conditioning: sinusoidal features of integer timesteps, then a SiLU MLP."""

    def __init__(self, freq_dim: int = 256, hidden: int = 1024, max_period: int = 10000):
        super().__init__()
        half = freq_dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("freqs", freqs, persistent=False)
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = t[:, None].float() * self.freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(emb)


def get_inputs():
    return [torch.randint(0, 1000, (256,))]


def get_init_inputs():
    return [256, 1024, 10000]
