"""Style: the KernelBench example's form without its extra_* flags (verbose=True), a shared-memory row reduction."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

l2norm_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void l2_normalize_kernel(const float* x, float* out, int cols) {
    __shared__ float sums[256];
    int row = blockIdx.x;
    float local = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[row * cols + c];
        local += v * v;
    }
    sums[threadIdx.x] = local;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sums[threadIdx.x] += sums[threadIdx.x + s];
        }
        __syncthreads();
    }
    float norm = fmaxf(sqrtf(sums[0]), 1e-12f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        out[row * cols + c] = x[row * cols + c] / norm;
    }
}

torch::Tensor l2_normalize_cuda(torch::Tensor x) {
    auto rows = x.size(0);
    auto cols = x.size(1);
    auto out = torch::empty_like(x);

    l2_normalize_kernel<<<rows, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), cols);

    return out;
}
"""

l2norm_cpp_source = "torch::Tensor l2_normalize_cuda(torch::Tensor x);"

l2_normalize = load_inline(
    name="corpus_l2norm_kb",
    cpp_sources=l2norm_cpp_source,
    cuda_sources=l2norm_source,
    functions=["l2_normalize_cuda"],
    verbose=True,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l2_normalize = l2_normalize

    def forward(self, x):
        return self.l2_normalize.l2_normalize_cuda(x)
