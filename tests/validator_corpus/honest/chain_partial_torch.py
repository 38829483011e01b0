"""Style: a custom kernel for relu(1.5 x + y), the sigmoid term left to PyTorch (ide only: torch does part)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
__global__ void relu_axpy_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(1.5f * x[i] + y[i], 0.0f);
}

torch::Tensor relu_axpy(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    relu_axpy_kernel<<<(n + 511) / 512, 512>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

relu_axpy = load_inline(name="corpus_chain_partial", cpp_sources="torch::Tensor relu_axpy(torch::Tensor x, torch::Tensor y);",
                        cuda_sources=source, functions=["relu_axpy"], verbose=True)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return relu_axpy.relu_axpy(x.contiguous(), y.contiguous()) - 0.25 * torch.sigmoid(y)
