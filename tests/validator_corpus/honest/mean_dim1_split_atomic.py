"""Style: split reduction: atomicAdd of partial sums into a zeroed buffer, then a scale kernel; build_directory set."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

constexpr int kRowsPerSplit = 128;

__global__ void partial_column_sums(const float* __restrict__ x, float* __restrict__ sums, int reduce, int inner) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int batch = blockIdx.z;
    const int r0 = blockIdx.y * kRowsPerSplit;
    if (col >= inner) return;
    const float* base = x + ((long long)batch * reduce + r0) * inner + col;
    const int count = min(kRowsPerSplit, reduce - r0);
    float sum = 0.0f;
    for (int r = 0; r < count; ++r) sum += base[(long long)r * inner];
    atomicAdd(&sums[(long long)batch * inner + col], sum);
}

__global__ void scale_kernel(float* __restrict__ values, long long n, float factor) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) values[i] *= factor;
}

torch::Tensor mean_over_dim1(torch::Tensor x) {
    auto input = x.contiguous();
    const int batch = input.size(0), reduce = input.size(1), inner = input.size(2);
    auto out = torch::zeros({batch, inner}, input.options());
    dim3 grid((inner + 255) / 256, (reduce + kRowsPerSplit - 1) / kRowsPerSplit, batch);
    partial_column_sums<<<grid, 256>>>(input.data_ptr<float>(), out.data_ptr<float>(), reduce, inner);
    const long long n = out.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n, 1.0f / reduce);
    return out;
}
"""

mean_ext = load_inline(
    name="corpus_mean_dim1_atomic",
    cpp_sources="torch::Tensor mean_over_dim1(torch::Tensor x);",
    cuda_sources=cuda_src,
    functions=["mean_over_dim1"],
    build_directory="/tmp/corpus_mean_dim1_atomic_build",
)


class ModelNew(nn.Module):
    def forward(self, x):
        return mean_ext.mean_over_dim1(x)
