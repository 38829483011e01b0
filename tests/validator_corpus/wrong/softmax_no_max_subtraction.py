"""Wrong: softmax as exp(x) / sum(exp(x)) without subtracting the row max: inf / inf = NaN once logits pass ~88."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void softmax_naive_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float* out = y + (long long)row * cols;
    float total = 0.0f;
    for (int c = lane; c < cols; c += 32) total += expf(in[c]);
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    for (int c = lane; c < cols; c += 32) out[c] = expf(in[c]) / total;
}

torch::Tensor softmax_naive(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int rows = input.size(0), cols = input.size(1);
    softmax_naive_kernel<<<(rows + 7) / 8, 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_softmax_nomax", cpp_sources="torch::Tensor softmax_naive(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["softmax_naive"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.softmax_naive(x)
