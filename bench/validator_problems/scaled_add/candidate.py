import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
__global__ void scaled_add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + 2.5f * b[i];
    }
}

torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    auto out = torch::empty_like(a);
    long n = a.numel();
    int threads = 256;
    scaled_add_kernel<<<(n + threads - 1) / threads, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

cpp_source = "torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b);"

ext = load_inline(
    name="scaled_add",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scaled_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.scaled_add(a.contiguous(), b.contiguous())

