import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


def get_inputs():
    return [torch.randn(4096, 2 * 1375, dtype=torch.bfloat16) * 2]


def get_init_inputs():
    return []
