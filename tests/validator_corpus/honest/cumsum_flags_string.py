"""Style: several compiler flags written in one string of the flag lists; one warp scans a row 32 values at a time."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void warp_row_cumsum(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float* out = y + (long long)row * cols;
    float carry = 0.0f;
    for (int base = 0; base < cols; base += 32) {
        const int c = base + lane;
        float v = c < cols ? in[c] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += up;
        }
        if (c < cols) out[c] = carry + v;
        carry += __shfl_sync(0xffffffffu, v, 31);
    }
}

torch::Tensor warp_cumsum(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int rows = input.size(0), cols = input.size(1);
    warp_row_cumsum<<<(rows + 3) / 4, 128>>>(input.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

ext = load_inline(
    name="corpus_cumsum_flags_string",
    cpp_sources="torch::Tensor warp_cumsum(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["warp_cumsum"],
    extra_cflags=["-O3 -DNDEBUG"],
    extra_cuda_cflags=["-O3 -lineinfo"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.warp_cumsum(x)
