import torch
import torch.nn as nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=4096, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_position_embeddings).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().half(), persistent=False)
        self.register_buffer("sin_cached", emb.sin().half(), persistent=False)

    def forward(self, position_ids):
        return self.cos_cached[position_ids], self.sin_cached[position_ids]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    """Applies rotary position embeddings to queries and (grouped) keys at arbitrary positions."""

    def __init__(self, head_dim=128, max_positions=4096):
        super().__init__()
        self.rotary = RotaryEmbedding(head_dim, max_positions)

    def forward(self, q, k, position_ids):
        # q: (batch, heads, seq, head_dim), k: (batch, kv_heads, seq, head_dim), position_ids: (batch, seq)
        cos, sin = self.rotary(position_ids)
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed


def get_inputs():
    batch, seq = 2, 300
    q = torch.randn(batch, 8, seq, 128, dtype=torch.float16)
    k = torch.randn(batch, 2, seq, 128, dtype=torch.float16)
    # every sequence continues a cache of a different length
    position_ids = torch.arange(seq).unsqueeze(0) + torch.randint(0, 3000, (batch, 1))
    return [q, k, position_ids]


def get_init_inputs():
    return [128, 4096]
