"""Style: nn.Linear (cuBLAS) kept for the GEMM, a custom kernel only for the erf-GELU epilogue (ide only)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_source = r"""
__global__ void gelu_erf_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor gelu_erf(torch::Tensor x) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    gelu_erf_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

gelu = load_inline(name="corpus_linear_gelu_cublas", cpp_sources="torch::Tensor gelu_erf(torch::Tensor x);",
                   cuda_sources=gelu_source, functions=["gelu_erf"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return gelu.gelu_erf(self.linear(x).contiguous())
