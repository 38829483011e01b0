"""Style: the extension is built inside ModelNew.__init__ and kept on self; two-pass block reduction in shared memory."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

LAYERNORM_CUDA = r"""
#include <torch/extension.h>

template <int THREADS>
__device__ float block_sum(float value, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) value += __shfl_down_sync(0xffffffffu, value, o);
    if (lane == 0) scratch[warp] = value;
    __syncthreads();
    value = threadIdx.x < THREADS / 32 ? scratch[threadIdx.x] : 0.0f;
    if (warp == 0) {
        for (int o = 16; o > 0; o >>= 1) value += __shfl_down_sync(0xffffffffu, value, o);
        if (lane == 0) scratch[0] = value;
    }
    __syncthreads();
    const float total = scratch[0];
    __syncthreads();  // scratch is reused by the next reduction
    return total;
}

template <int THREADS>
__global__ void layernorm_two_pass_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                          const float* __restrict__ bias, float* __restrict__ y, int cols,
                                          float eps) {
    __shared__ float scratch[32];
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) sum += in[c];
    const float mean = block_sum<THREADS>(sum, scratch) / cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        const float d = in[c] - mean;
        sq += d * d;
    }
    const float inv_std = rsqrtf(block_sum<THREADS>(sq, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += THREADS) out[c] = (in[c] - mean) * inv_std * weight[c] + bias[c];
}

torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int cols = input.size(-1);
    const int rows = input.numel() / cols;
    layernorm_two_pass_kernel<256><<<rows, 256>>>(input.data_ptr<float>(), weight.data_ptr<float>(),
                                                   bias.data_ptr<float>(), out.data_ptr<float>(), cols, (float)eps);
    return out;
}
"""

LAYERNORM_CPP = "torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        self.ext = load_inline(name="corpus_layernorm_init", cpp_sources=LAYERNORM_CPP, cuda_sources=LAYERNORM_CUDA,
                               functions=["layer_norm_forward"], verbose=True)

    def forward(self, x):
        return self.ext.layer_norm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
