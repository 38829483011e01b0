import torch
import torch.nn as nn


class Model(nn.Module):
    """Transformer MLP sub-block with pre-LayerNorm and a residual connection, run in fp16."""

    def __init__(self, dim=384, mlp_ratio=4.0, dropout=0.1):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)
        self.half()

    def forward(self, x):
        h = self.drop(self.act(self.fc1(self.norm(x))))
        return x + self.drop(self.fc2(h))


def get_inputs():
    return [torch.randn(4, 97, 384).half()]


def get_init_inputs():
    return [384, 4.0, 0.1]
