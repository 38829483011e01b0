"""Honest style: module object kept in an attribute, zeros_like output, launch on the implicit default stream."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

axpb_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void axpb_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = 2.0f * a[idx] + b[idx];
    }
}

torch::Tensor axpb_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    axpb_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""
axpb_cpp_source = "torch::Tensor axpb_cuda(torch::Tensor a, torch::Tensor b);"
axpb = load_inline(name="axpb_style", cpp_sources=axpb_cpp_source, cuda_sources=axpb_source, functions=["axpb_cuda"],
                   verbose=False)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.axpb = axpb

    def forward(self, a, b):
        return self.axpb.axpb_cuda(a, b)
