"""Wrong: log(softmax(x)) instead of x - logsumexp(x): probabilities that underflow to 0 give log(0) = -inf."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void log_of_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float* out = y + (long long)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(in[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int c = lane; c < cols; c += 32) out[c] = logf(expf(in[c] - m) / s);
}

torch::Tensor log_softmax(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int rows = input.size(0), cols = input.size(1);
    log_of_softmax_kernel<<<(rows + 7) / 8, 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_log_softmax", cpp_sources="torch::Tensor log_softmax(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["log_softmax"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.log_softmax(x)
