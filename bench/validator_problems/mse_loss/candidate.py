import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
// Pass 1: one partial sum per block; pass 2: one block sums the partials (deterministic order).
__global__ void mse_partial_kernel(const float* __restrict__ p, const float* __restrict__ t, float* __restrict__ partial, long n) {
    __shared__ float s[256];
    float acc = 0.f;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float d = p[i] - t[i];
        acc += d * d;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void mse_final_kernel(const float* __restrict__ partial, float* __restrict__ out, int blocks, long n) {
    __shared__ float s[256];
    float acc = 0.f;
    for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0] / (float)n;
}

torch::Tensor mse_loss(torch::Tensor p, torch::Tensor t) {
    TORCH_CHECK(p.is_cuda() && t.is_cuda() && p.numel() == t.numel(), "same-size CUDA tensors");
    long n = p.numel();
    int blocks = 1024;
    auto partial = torch::empty({blocks}, p.options());
    auto out = torch::empty({}, p.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    mse_partial_kernel<<<blocks, 256, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), partial.data_ptr<float>(), n);
    mse_final_kernel<<<1, 256, 0, stream>>>(partial.data_ptr<float>(), out.data_ptr<float>(), blocks, n);
    return out;
}
"""

cpp_source = "torch::Tensor mse_loss(torch::Tensor p, torch::Tensor t);"

ext = load_inline(
    name="mse_loss",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["mse_loss"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return ext.mse_loss(pred.contiguous(), target.contiguous())

