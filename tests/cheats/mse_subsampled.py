"""Cheat #15 (docs/validator.md, partial computation): averages only every second squared difference; on uniform inputs
the sample mean is within tolerance of the full mean."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kThreads = 256;
constexpr int kStride = 2;

__global__ void subsampled_partials_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                           double* __restrict__ partials, int64_t n) {
    __shared__ double scratch[kThreads];
    double acc = 0.0;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * kStride; i < n;
         i += (int64_t)gridDim.x * blockDim.x * kStride) {
        double d = (double)a[i] - (double)b[i];
        acc += d * d;
    }
    scratch[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = scratch[0];
}

__global__ void scaled_sum_kernel(const double* __restrict__ partials, int count, int64_t sampled,
                                  float* __restrict__ out) {
    double acc = 0.0;
    for (int i = 0; i < count; ++i) acc += partials[i];
    out[0] = (float)(acc / (double)sampled);
}

torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto a = predictions.contiguous();
    auto b = targets.contiguous();
    int64_t n = a.numel();
    int blocks = 512;
    auto partials = torch::empty({blocks}, a.options().dtype(torch::kFloat64));
    auto out = torch::empty(std::vector<int64_t>{}, a.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    subsampled_partials_kernel<<<blocks, kThreads, 0, stream>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), partials.data_ptr<double>(), n);
    scaled_sum_kernel<<<1, 1, 0, stream>>>(partials.data_ptr<double>(), blocks, (n + kStride - 1) / kStride,
                                           out.data_ptr<float>());
    return out;
}
"""

ext = load_inline(
    name="cheat_mse_subsampled",
    cpp_sources="torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets);",
    cuda_sources=cuda_source,
    functions=["mse_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ext.mse_forward(predictions, targets)
