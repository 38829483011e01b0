"""Style: torch.utils.cpp_extension.load() of a .cu kernel file and a .cpp binding file that sit beside this module."""

import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

_here = os.path.dirname(os.path.abspath(__file__))

layernorm_ext = load(
    name="corpus_layernorm_files",
    sources=[os.path.join(_here, "layernorm_binding.cpp"), os.path.join(_here, "layernorm_kernel.cu")],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return layernorm_ext.forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
