"""Index of the largest logit in each of 8192 rows of 1000 classes (int64 output, compared exactly)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.argmax(logits, dim=1)


def get_inputs():
    return [torch.randn(8192, 1000)]


def get_init_inputs():
    return []
