"""Style: AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...) over a templated kernel; fp32 weight and statistics."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

template <typename scalar_t, int THREADS>
__global__ void rmsnorm_kernel(const scalar_t* __restrict__ x, const float* __restrict__ weight,
                               scalar_t* __restrict__ y, int hidden, float eps) {
    __shared__ float partial[THREADS];
    const scalar_t* in = x + (int64_t)blockIdx.x * hidden;
    scalar_t* out = y + (int64_t)blockIdx.x * hidden;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < hidden; c += THREADS) {
        const float v = static_cast<float>(in[c]);
        sq += v * v;
    }
    partial[threadIdx.x] = sq;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / hidden + eps);
    for (int c = threadIdx.x; c < hidden; c += THREADS) {
        out[c] = static_cast<scalar_t>(static_cast<float>(in[c]) * inv_rms * weight[c]);
    }
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int hidden = input.size(-1);
    const int rows = input.numel() / hidden;
    constexpr int threads = 512;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, input.scalar_type(), "rms_norm", ([&] {
        rmsnorm_kernel<scalar_t, threads><<<rows, threads>>>(input.data_ptr<scalar_t>(), weight.data_ptr<float>(),
                                                             out.data_ptr<scalar_t>(), hidden, static_cast<float>(eps));
    }));
    return out;
}
"""

ext = load_inline(name="corpus_rmsnorm_dispatch2", cpp_sources="torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);",
                  cuda_sources=source, functions=["rms_norm"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return ext.rms_norm(x, self.weight, self.eps)
