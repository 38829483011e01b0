"""Style: one block per row, classic shared-memory tree reductions with __syncthreads, dynamic shared memory."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void block_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float shared[];
    const int tid = threadIdx.x;
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;

    float local = -INFINITY;
    for (int c = tid; c < cols; c += blockDim.x) local = fmaxf(local, in[c]);
    shared[tid] = local;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (tid < half) shared[tid] = fmaxf(shared[tid], shared[tid + half]);
        __syncthreads();
    }
    const float row_max = shared[0];
    __syncthreads();  // everyone has read the max before the sums overwrite it

    local = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) local += expf(in[c] - row_max);
    shared[tid] = local;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (tid < half) shared[tid] += shared[tid + half];
        __syncthreads();
    }
    const float inv_sum = 1.0f / shared[0];
    for (int c = tid; c < cols; c += blockDim.x) out[c] = expf(in[c] - row_max) * inv_sum;
}

torch::Tensor block_softmax(torch::Tensor x) {
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const int threads = 512;  // a power of two: the tree halves it
    block_softmax_kernel<<<input.size(0), threads, threads * sizeof(float)>>>(
        input.data_ptr<float>(), output.data_ptr<float>(), input.size(1));
    return output;
}
"""

cpp_src = "torch::Tensor block_softmax(torch::Tensor x);"

block_softmax = load_inline(name="corpus_softmax_shared", cpp_sources=cpp_src, cuda_sources=cuda_src,
                            functions=["block_softmax"])


class ModelNew(nn.Module):
    def forward(self, x):
        return block_softmax.block_softmax(x)
