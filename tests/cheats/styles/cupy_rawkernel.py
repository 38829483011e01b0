"""Honest style: a CuPy RawKernel compiled with NVRTC, tensors passed through DLPack."""

import cupy as cp
import torch
import torch.nn as nn

_kernel = cp.RawKernel(r"""
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
""", "scale")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _kernel(((n + 255) // 256,), (256,), (cp.from_dlpack(x), cp.from_dlpack(y), cp.int32(n)))
        return y
