"""Wrong: float4 loads over n / 4 vectors and no tail: the last n % 4 elements (3 here) are never written."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__device__ __forceinline__ float gelu_tanh(float v) {
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__global__ void gelu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, long long n_vec) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        float4 v = x[i];
        v.x = gelu_tanh(v.x);
        v.y = gelu_tanh(v.y);
        v.z = gelu_tanh(v.z);
        v.w = gelu_tanh(v.w);
        y[i] = v;
    }
}

torch::Tensor gelu_vec4(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const long long n_vec = input.numel() / 4;
    long long blocks = (n_vec + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    gelu_vec4_kernel<<<blocks, 256>>>(reinterpret_cast<const float4*>(input.data_ptr<float>()),
                                      reinterpret_cast<float4*>(out.data_ptr<float>()), n_vec);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_gelu_tail", cpp_sources="torch::Tensor gelu_vec4(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["gelu_vec4"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.gelu_vec4(x)
