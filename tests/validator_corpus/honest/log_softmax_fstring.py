"""Style: the CUDA source is an f-string that bakes in the block size (arguments known only when the module runs)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

THREADS = 512

cuda_source = f"""
#include <torch/extension.h>
#define THREADS {THREADS}

__global__ void log_softmax_block_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {{
    __shared__ float scratch[THREADS];
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    const int tid = threadIdx.x;
    float m = -INFINITY;
    for (int c = tid; c < cols; c += THREADS) m = fmaxf(m, in[c]);
    scratch[tid] = m;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {{
        if (tid < half) scratch[tid] = fmaxf(scratch[tid], scratch[tid + half]);
        __syncthreads();
    }}
    const float row_max = scratch[0];
    __syncthreads();
    float s = 0.0f;
    for (int c = tid; c < cols; c += THREADS) s += expf(in[c] - row_max);
    scratch[tid] = s;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {{
        if (tid < half) scratch[tid] += scratch[tid + half];
        __syncthreads();
    }}
    const float log_sum = logf(scratch[0]);
    for (int c = tid; c < cols; c += THREADS) out[c] = in[c] - row_max - log_sum;
}}

torch::Tensor log_softmax_block(torch::Tensor x) {{
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    log_softmax_block_kernel<<<input.size(0), THREADS>>>(input.data_ptr<float>(), out.data_ptr<float>(), input.size(1));
    return out;
}}
"""

ext = load_inline(name=f"corpus_log_softmax_t{THREADS}", cpp_sources="torch::Tensor log_softmax_block(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["log_softmax_block"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.log_softmax_block(x)
