"""A kernel in the KernelBench load_inline style: put the cursor inside the __global__ body for infill.

The reference module is Model below; ModelNew runs the custom kernel.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_kernel(const float* x, const float* bias, float* out, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = x[i] + bias[i % cols];
        out[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    auto out = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    int threads = 256, blocks = (rows * cols + threads - 1) / threads;
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

cpp_source = "torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias);"

bias_relu = load_inline(
    name="bias_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_relu_cuda"],
    verbose=False,
)


class Model(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.relu(x + self.bias)


class ModelNew(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return bias_relu.bias_relu_cuda(x.contiguous(), self.bias)


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return [1024]
