import torch
import torch.nn as nn


class Model(nn.Module):
    """Next-token distribution for top-k sampling: keep the k largest logits of each row, then a temperature softmax."""

    def __init__(self, top_k: int = 50, temperature: float = 0.7):
        super().__init__()
        self.top_k = top_k
        self.temperature = temperature

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.softmax(logits / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(16, 32003) * 4.0]


def get_init_inputs():
    return [50, 0.7]
