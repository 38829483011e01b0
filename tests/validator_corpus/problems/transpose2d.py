"""Materialised transpose of an fp32 matrix whose sides (4099 x 2053) are not multiples of a tile."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(4099, 2053)]


def get_init_inputs():
    return []
