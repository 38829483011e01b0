"""Style: two kernels and two launches per call: per-row log-sum-exp into a scratch tensor, then x - lse."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void row_logsumexp_kernel(const float* __restrict__ x, float* __restrict__ lse, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(in[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) lse[row] = m + logf(s);
}

__global__ void subtract_row_kernel(const float* __restrict__ x, const float* __restrict__ lse,
                                    float* __restrict__ out, long long n, int cols) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = x[i] - lse[i / cols];
    }
}

torch::Tensor log_softmax_rows(torch::Tensor x) {
    auto input = x.contiguous();
    const int rows = input.size(0), cols = input.size(1);
    auto lse = torch::empty({rows}, input.options());
    auto out = torch::empty_like(input);
    row_logsumexp_kernel<<<(rows + 7) / 8, 256>>>(input.data_ptr<float>(), lse.data_ptr<float>(), rows, cols);
    const long long n = input.numel();
    subtract_row_kernel<<<4096, 256>>>(input.data_ptr<float>(), lse.data_ptr<float>(), out.data_ptr<float>(), n, cols);
    return out;
}
"""

log_softmax = load_inline(name="corpus_log_softmax_two", cpp_sources="torch::Tensor log_softmax_rows(torch::Tensor x);",
                          cuda_sources=cuda_source, functions=["log_softmax_rows"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return log_softmax.log_softmax_rows(x)
