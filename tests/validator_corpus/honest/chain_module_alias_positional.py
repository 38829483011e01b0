"""Style: `from torch.utils import cpp_extension`, load_inline called through the module with positional arguments."""

import torch
import torch.nn as nn
from torch.utils import cpp_extension

header = "torch::Tensor chain_forward(const torch::Tensor& x, const torch::Tensor& y);"

kernels = r"""
#include <torch/extension.h>

__global__ void chain_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float yv = y[i];
        out[i] = fmaxf(fmaf(1.5f, x[i], yv), 0.0f) - 0.25f / (1.0f + expf(-yv));
    }
}

torch::Tensor chain_forward(const torch::Tensor& x, const torch::Tensor& y) {
    TORCH_CHECK(x.sizes() == y.sizes() && x.scalar_type() == torch::kFloat32, "chain_forward: two float32 tensors");
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto out = torch::empty_like(xc);
    chain_kernel<<<2048, 256>>>(xc.data_ptr<float>(), yc.data_ptr<float>(), out.data_ptr<float>(), xc.numel());
    return out;
}
"""

chain_ext = cpp_extension.load_inline("corpus_chain_alias_positional", header, kernels, functions=["chain_forward"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return chain_ext.chain_forward(x, y)
