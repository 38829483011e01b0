"""Wrong: sigmoid written as 1 / (1 + exp(g)) (the exponent's sign dropped), so it computes up * g * sigmoid(-g)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>

__global__ void swiglu_kernel(const __half* __restrict__ up, const __half* __restrict__ gate, __half* __restrict__ out,
                              long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = __half2float(gate[i]);
        out[i] = __float2half(__half2float(up[i]) * g / (1.0f + __expf(g)));
    }
}

torch::Tensor swiglu(torch::Tensor up, torch::Tensor gate) {
    auto out = torch::empty_like(up);
    long long n = up.numel();
    swiglu_kernel<<<(n + 255) / 256, 256>>>(reinterpret_cast<const __half*>(up.data_ptr<at::Half>()),
                                            reinterpret_cast<const __half*>(gate.data_ptr<at::Half>()),
                                            reinterpret_cast<__half*>(out.data_ptr<at::Half>()), n);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_swiglu_sign", cpp_sources="torch::Tensor swiglu(torch::Tensor up, torch::Tensor gate);",
                  cuda_sources=cuda_source, functions=["swiglu"])


class ModelNew(nn.Module):
    def forward(self, up, gate):
        return ext.swiglu(up.contiguous(), gate.contiguous())
