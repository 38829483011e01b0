"""Row sums of large int32 counts; torch promotes the sum to int64, and the totals exceed the int32 range."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        return counts.sum(dim=1)


def get_inputs():
    return [torch.randint(0, 1 << 22, (2048, 4096), dtype=torch.int32)]


def get_init_inputs():
    return []
