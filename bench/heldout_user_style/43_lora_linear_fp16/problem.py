import torch
import torch.nn as nn


class Model(nn.Module):
    """A frozen linear layer with a low-rank (LoRA) update, y = W x + b + (alpha / r) * B A x, in fp16."""

    def __init__(self, in_features, out_features, r=16, alpha=32, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias, dtype=torch.float16)
        self.lora_A = nn.Parameter(torch.randn(r, in_features, dtype=torch.float16) / in_features**0.5)
        self.lora_B = nn.Parameter(torch.randn(out_features, r, dtype=torch.float16) * 0.05)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def get_inputs():
    return [torch.randn(4, 129, 768, dtype=torch.float16)]


def get_init_inputs():
    return [768, 768, 16, 32, True]
