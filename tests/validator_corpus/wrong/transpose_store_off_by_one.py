"""Wrong: the store guard of a tiled transpose uses `x < rows - 1`, so the output's last column is never written."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void transpose_tiled(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x;
    int y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) {
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(long long)(y + j) * cols + x];
    }
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) {
        if (x < rows - 1 && y + j < cols) out[(long long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
    }
}

torch::Tensor transpose2d(torch::Tensor x) {
    auto input = x.contiguous();
    const int rows = input.size(0), cols = input.size(1);
    auto out = torch::empty({cols, rows}, input.options());
    transpose_tiled<<<dim3((cols + 31) / 32, (rows + 31) / 32), dim3(32, 8)>>>(input.data_ptr<float>(),
                                                                              out.data_ptr<float>(), rows, cols);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_transpose_bound", cpp_sources="torch::Tensor transpose2d(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["transpose2d"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.transpose2d(x)
