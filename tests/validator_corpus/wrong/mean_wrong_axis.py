"""Wrong: the mean runs along the contiguous last axis (dim=2) instead of dim=1; square inner dims keep the shape right."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

// One warp per output: out[b][i] = mean over the reduced axis.
__global__ void mean_axis_kernel(const float* __restrict__ x, float* __restrict__ out, long long outputs, int length) {
    const long long o = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (o >= outputs) return;
    const float* row = x + o * length;
    float sum = 0.0f;
    for (int k = lane; k < length; k += 32) sum += row[k];
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) out[o] = sum / length;
}

torch::Tensor mean_dim1(torch::Tensor x) {
    auto input = x.contiguous();
    const int batch = input.size(0), reduce = input.size(1), inner = input.size(2);
    auto out = torch::empty({batch, inner}, input.options());
    const long long outputs = (long long)batch * inner;
    mean_axis_kernel<<<(outputs + 7) / 8, 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), outputs, reduce);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_mean_axis", cpp_sources="torch::Tensor mean_dim1(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["mean_dim1"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.mean_dim1(x)
