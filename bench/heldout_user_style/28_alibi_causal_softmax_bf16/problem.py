import torch
import torch.nn as nn


def alibi_slopes(num_heads: int) -> torch.Tensor:
    # geometric sequence starting at 2^(-8/n), for a power-of-two number of heads
    start = 2.0 ** (-8.0 / num_heads)
    return torch.tensor([start ** (i + 1) for i in range(num_heads)])


class Model(nn.Module):
    """Attention probabilities with ALiBi linear position biases and a causal mask, from bf16 raw scores."""

    def __init__(self, num_heads: int = 8):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads).view(1, num_heads, 1, 1))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        B, H, T, S = scores.shape
        q_pos = torch.arange(T, device=scores.device)[:, None] + (S - T)
        k_pos = torch.arange(S, device=scores.device)[None, :]
        bias = self.slopes * (k_pos - q_pos).float()  # <= 0 for visible keys
        causal = k_pos <= q_pos
        logits = (scores.float() + bias).masked_fill(~causal, float("-inf"))
        return torch.softmax(logits, dim=-1).to(scores.dtype)


def get_inputs():
    # 40 new queries attending to a cache of 257 keys
    return [(torch.randn(2, 8, 40, 257) * 3).to(torch.bfloat16)]


def get_init_inputs():
    return [8]
