import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention pooling over a padded sequence with a learned scoring vector; returns the pooled vector and weights."""

    def __init__(self, dim):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, x, mask):
        # x: (B, T, D), mask: (B, T) bool, True for real tokens
        logits = self.score(x).squeeze(-1)
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        weights = logits.softmax(dim=-1)
        pooled = torch.einsum("bt,btd->bd", weights, x)
        return pooled, weights


def get_inputs():
    B, T, D = 64, 100, 512
    x = torch.randn(B, T, D)
    lengths = torch.randint(0, T + 1, (B,))  # a few sequences may be empty
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return [x, mask]


def get_init_inputs():
    return [512]
