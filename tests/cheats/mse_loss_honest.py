"""Honest MSE: grid-stride squared differences reduced per block in double, then one final block reduction."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kThreads = 256;

__global__ void squared_error_partials_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                              double* __restrict__ partials, int64_t n) {
    __shared__ double scratch[kThreads];
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
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

__global__ void mean_of_partials_kernel(const double* __restrict__ partials, int count, int64_t n,
                                        float* __restrict__ out) {
    __shared__ double scratch[kThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    scratch[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)(scratch[0] / (double)n);
}

torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "predictions and targets must have the same shape");
    auto a = predictions.contiguous();
    auto b = targets.contiguous();
    int64_t n = a.numel();
    int blocks = 1024;
    auto partials = torch::empty({blocks}, a.options().dtype(torch::kFloat64));
    auto out = torch::empty(std::vector<int64_t>{}, a.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    squared_error_partials_kernel<<<blocks, kThreads, 0, stream>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), partials.data_ptr<double>(), n);
    mean_of_partials_kernel<<<1, kThreads, 0, stream>>>(partials.data_ptr<double>(), blocks, n, out.data_ptr<float>());
    return out;
}
"""

cpp_source = "torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets);"

mse_ext = load_inline(
    name="cheat_suite_mse_honest",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["mse_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return mse_ext.mse_forward(predictions, targets)
