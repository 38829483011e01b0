"""Style: everything in cuda_sources, the PYBIND11_MODULE included, and an empty cpp_sources string."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_code = r"""
#include <torch/extension.h>

__global__ void transpose_naive_kernel(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) dst[(long long)c * rows + r] = src[(long long)r * cols + c];
}

torch::Tensor transpose(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "transpose: a matrix expected");
    auto src = x.contiguous();
    const int rows = src.size(0), cols = src.size(1);
    auto dst = torch::empty({cols, rows}, src.options());
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    transpose_naive_kernel<<<grid, block>>>(src.data_ptr<float>(), dst.data_ptr<float>(), rows, cols);
    return dst;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("transpose", &transpose, "materialised 2-D transpose");
}
"""

transpose_ext = load_inline(name="corpus_transpose_pybind_cuda", cpp_sources="", cuda_sources=cuda_code)


class ModelNew(nn.Module):
    def forward(self, x):
        return transpose_ext.transpose(x)
