"""Honest style: a raw kernel compiled with torch.cuda._compile_kernel (NVRTC)."""

import torch
import torch.nn as nn

KERNEL = """
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
scale = torch.cuda._compile_kernel(KERNEL, "scale")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scale(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[x, y, n])
        return y
