"""Honest ReLU: one elementwise kernel on the current stream, output allocated per call."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "expected a float32 CUDA tensor");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    int64_t n = input.numel();
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        input.data_ptr<float>(), output.data_ptr<float>(), n);
    return output;
}
"""

cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu_ext = load_inline(
    name="cheat_suite_relu_honest",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = relu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
