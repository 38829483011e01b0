"""Wrong: a chunked scan that restarts every 1024-value chunk at zero (the carry from earlier chunks is never added)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void chunked_cumsum(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float warp_totals[32];
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int base = 0; base < cols; base += blockDim.x) {
        const int c = base + threadIdx.x;
        float v = c < cols ? in[c] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += up;
        }
        if (lane == 31) warp_totals[warp] = v;
        __syncthreads();
        float before = 0.0f;
        for (int w = 0; w < warp; ++w) before += warp_totals[w];
        if (c < cols) out[c] = v + before;
        __syncthreads();
    }
}

torch::Tensor cumsum_rows(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    chunked_cumsum<<<input.size(0), 1024>>>(input.data_ptr<float>(), out.data_ptr<float>(), input.size(1));
    return out;
}
"""

ext = load_inline(name="corpus_wrong_cumsum_carry", cpp_sources="torch::Tensor cumsum_rows(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["cumsum_rows"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.cumsum_rows(x)
