import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-head attention core over right-padded key sequences (True in the mask marks padding)."""

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim

    def forward(self, q, k, v, key_padding_mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1)
        return attn @ v


def get_inputs():
    B, H, Tq, Tk, D = 4, 8, 150, 211, 64
    q = torch.randn(B, H, Tq, D, dtype=torch.float16)
    k = torch.randn(B, H, Tk, D, dtype=torch.float16)
    v = torch.randn(B, H, Tk, D, dtype=torch.float16)
    lengths = torch.randint(Tk // 3, Tk + 1, (B,))
    key_padding_mask = torch.arange(Tk)[None, :] >= lengths[:, None]
    return [q, k, v, key_padding_mask]


def get_init_inputs():
    return [8, 64]
