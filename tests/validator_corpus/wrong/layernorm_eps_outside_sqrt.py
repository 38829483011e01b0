"""Wrong: 1 / (sqrt(var) + eps) instead of rsqrt(var + eps): unseen at unit variance, 5% off on small inputs."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y, int cols, float eps) {
    __shared__ float shared[256];
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) sum += in[c];
    shared[threadIdx.x] = sum;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    const float mean = shared[0] / cols;
    __syncthreads();
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) {
        const float d = in[c] - mean;
        sq += d * d;
    }
    shared[threadIdx.x] = sq;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    const float inv_std = 1.0f / (sqrtf(shared[0] / cols) + eps);
    for (int c = threadIdx.x; c < cols; c += 256) out[c] = (in[c] - mean) * inv_std * gamma[c] + beta[c];
}

torch::Tensor layernorm(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int cols = input.size(-1);
    layernorm_kernel<<<input.numel() / cols, 256>>>(input.data_ptr<float>(), gamma.data_ptr<float>(),
                                                    beta.data_ptr<float>(), out.data_ptr<float>(), cols, (float)eps);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_layernorm_eps",
                  cpp_sources="torch::Tensor layernorm(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);",
                  cuda_sources=cuda_source, functions=["layernorm"])


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return ext.layernorm(x, self.norm.weight, self.norm.bias, self.norm.eps)
