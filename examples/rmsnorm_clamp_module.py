"""A PyTorch module to generate a CUDA kernel for: RMS normalisation over the last dimension with a learned scale,
then a clamp to [-1, 1] (the kind of fused row-wise op the embedded dice-tiny checkpoint was trained on).

Try: dice-copilot generate --module examples/rmsnorm_clamp_module.py --max-new-tokens 1536
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """rms_norm over the last dim, then hardtanh."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        x = F.hardtanh(x, min_val=-1.0, max_val=1.0)
        return x


rows = 4096
dim = 2048


def get_inputs():
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return [dim, 1e-5]
