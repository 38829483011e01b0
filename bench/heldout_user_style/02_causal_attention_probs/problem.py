import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k):
        # q, k: (batch, heads, seq, head_dim) -> attention probabilities (batch, heads, seq, seq)
        seq_len = q.size(-2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return scores.softmax(dim=-1)


B, H, T, D = 2, 6, 203, 64


def get_inputs():
    return [torch.randn(B, H, T, D), torch.randn(B, H, T, D)]


def get_init_inputs():
    return [D]
