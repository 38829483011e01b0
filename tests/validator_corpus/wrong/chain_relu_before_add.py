"""Wrong: the ReLU is applied to 1.5 x before y is added (relu(1.5x) + y instead of relu(1.5x + y))."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
__global__ void chain_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float yv = y[i];
        out[i] = fmaxf(1.5f * x[i], 0.0f) + yv - 0.25f / (1.0f + expf(-yv));
    }
}

torch::Tensor chain(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    chain_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_chain", cpp_sources="torch::Tensor chain(torch::Tensor x, torch::Tensor y);",
                  cuda_sources=cuda_source, functions=["chain"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.chain(x.contiguous(), y.contiguous())
