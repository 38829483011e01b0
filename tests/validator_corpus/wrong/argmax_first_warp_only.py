"""Wrong: 4 warps a block, but only warp 0's shuffle result is written (the other warps' columns are lost)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void argmax_kernel(const float* __restrict__ x, long long* __restrict__ out, int cols) {
    const float* row = x + (long long)blockIdx.x * cols;
    float best = -INFINITY;
    int best_index = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = row[c];
        if (v > best) {
            best = v;
            best_index = c;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_down_sync(0xffffffffu, best, o);
        const int i = __shfl_down_sync(0xffffffffu, best_index, o);
        if (v > best || (v == best && i < best_index)) {
            best = v;
            best_index = i;
        }
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_index;
}

torch::Tensor argmax_rows(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty({input.size(0)}, input.options().dtype(torch::kInt64));
    argmax_kernel<<<input.size(0), 128>>>(input.data_ptr<float>(), reinterpret_cast<long long*>(out.data_ptr<int64_t>()),
                                         input.size(1));
    return out;
}
"""

ext = load_inline(name="corpus_wrong_argmax_warp", cpp_sources="torch::Tensor argmax_rows(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["argmax_rows"])


class ModelNew(nn.Module):
    def forward(self, logits):
        return ext.argmax_rows(logits)
