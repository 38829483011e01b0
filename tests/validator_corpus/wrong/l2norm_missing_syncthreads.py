"""Wrong (race): warp 0 sums the shared partials with no __syncthreads after the other warps write them."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void l2_normalize_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float partial[256];
    __shared__ float norm;
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sq += in[c] * in[c];
    partial[threadIdx.x] = sq;
    if (threadIdx.x < 32) {
        float total = 0.0f;
        for (int i = threadIdx.x; i < blockDim.x; i += 32) total += partial[i];
        for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
        if (threadIdx.x == 0) norm = fmaxf(sqrtf(total), 1e-12f);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c] / norm;
}

torch::Tensor l2_normalize(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    l2_normalize_kernel<<<input.size(0), 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), input.size(1));
    return out;
}
"""

ext = load_inline(name="corpus_wrong_l2norm_race", cpp_sources="torch::Tensor l2_normalize(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["l2_normalize"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.l2_normalize(x)
