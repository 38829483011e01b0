"""Wrong: int32 accumulators for int32 data: row totals above 2^31 wrap around before being widened to int64."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void int_row_sum_kernel(const int* __restrict__ x, long long* __restrict__ out, int cols) {
    __shared__ int partial[256];
    const int* row = x + (long long)blockIdx.x * cols;
    int total = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) total += row[c];
    partial[threadIdx.x] = total;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (long long)partial[0];
}

torch::Tensor int_row_sum(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty({input.size(0)}, input.options().dtype(torch::kInt64));
    int_row_sum_kernel<<<input.size(0), 256>>>(input.data_ptr<int>(), reinterpret_cast<long long*>(out.data_ptr<int64_t>()),
                                               input.size(1));
    return out;
}
"""

ext = load_inline(name="corpus_wrong_int_sum", cpp_sources="torch::Tensor int_row_sum(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["int_row_sum"])


class ModelNew(nn.Module):
    def forward(self, counts):
        return ext.int_row_sum(counts)
