import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused QKV projection of a ViT attention layer, split into heads; queries come out pre-scaled."""

    def __init__(self, embed_dim=512, num_heads=8, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(embed_dim, embed_dim * 3, bias=qkv_bias, dtype=torch.float16)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        return q, k, v


def get_inputs():
    return [torch.randn(6, 197, 512, dtype=torch.float16)]


def get_init_inputs():
    return [512, 8, True]
