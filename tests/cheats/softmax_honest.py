"""Honest row softmax: one block per row, max and sum reduced in shared memory, fp32 throughout."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float scratch[];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;

    float local_max = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local_max = fmaxf(local_max, row[c]);
    scratch[threadIdx.x] = local_max;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
        __syncthreads();
    }
    float row_max = scratch[0];
    __syncthreads();

    float local_sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local_sum += expf(row[c] - row_max);
    scratch[threadIdx.x] = local_sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    float inv_sum = 1.0f / scratch[0];

    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - row_max) * inv_sum;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32, "expected a 2-D float32 CUDA tensor");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    int rows = input.size(0);
    int cols = input.size(1);
    int threads = 256;
    softmax_rows_kernel<<<rows, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        input.data_ptr<float>(), output.data_ptr<float>(), cols);
    return output;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="cheat_suite_softmax_honest",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_forward(x)
