"""Style: the KernelBench example's load_inline(..., verbose=True, extra_cflags=[""], extra_ldflags=[""])."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void gelu_tanh_kernel(const float* x, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = x[idx];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        out[idx] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

torch::Tensor gelu_tanh_cuda(torch::Tensor x) {
    auto size = x.numel();
    auto out = torch::empty_like(x);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    gelu_tanh_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

gelu_cpp_source = "torch::Tensor gelu_tanh_cuda(torch::Tensor x);"

# Compile the inline CUDA code for the tanh GELU
gelu_tanh = load_inline(
    name="corpus_gelu_kb_example",
    cpp_sources=gelu_cpp_source,
    cuda_sources=gelu_source,
    functions=["gelu_tanh_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gelu_tanh = gelu_tanh

    def forward(self, x):
        return self.gelu_tanh.gelu_tanh_cuda(x)
