"""Style: one warp per row with Welford statistics merged by warp shuffles; nn.LayerNorm kept only to hold the weights."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

struct Welford {
    float count, mean, m2;
};

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
    const float count = a.count + b.count;
    if (count == 0.0f) return a;
    const float delta = b.mean - a.mean;
    const float weight_b = b.count / count;
    Welford out;
    out.count = count;
    out.mean = a.mean + delta * weight_b;
    out.m2 = a.m2 + b.m2 + delta * delta * a.count * weight_b;
    return out;
}

__global__ void layernorm_warp_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, float* __restrict__ y,
                                      int rows, int cols, float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float* out = y + (long long)row * cols;
    Welford w = {0.0f, 0.0f, 0.0f};
    for (int c = lane; c < cols; c += 32) {
        const float v = in[c];
        w.count += 1.0f;
        const float delta = v - w.mean;
        w.mean += delta / w.count;
        w.m2 += delta * (v - w.mean);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        Welford other;
        other.count = __shfl_xor_sync(0xffffffffu, w.count, offset);
        other.mean = __shfl_xor_sync(0xffffffffu, w.mean, offset);
        other.m2 = __shfl_xor_sync(0xffffffffu, w.m2, offset);
        w = welford_merge(w, other);
    }
    // Lanes merged in different orders; take lane 0's statistics so the whole row uses the same ones.
    const float mean = __shfl_sync(0xffffffffu, w.mean, 0);
    const float inv_std = rsqrtf(__shfl_sync(0xffffffffu, w.m2, 0) / cols + eps);
    for (int c = lane; c < cols; c += 32) out[c] = (in[c] - mean) * inv_std * gamma[c] + beta[c];
}

torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int cols = input.size(-1);
    const int rows = input.numel() / cols;
    const int warps_per_block = 4;
    layernorm_warp_kernel<<<(rows + warps_per_block - 1) / warps_per_block, warps_per_block * 32>>>(
        input.data_ptr<float>(), gamma.contiguous().data_ptr<float>(), beta.contiguous().data_ptr<float>(),
        out.data_ptr<float>(), rows, cols, (float)eps);
    return out;
}
"""

ext = load_inline(
    name="corpus_layernorm_welford",
    cpp_sources="torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);",
    cuda_sources=cuda_source,
    functions=["layernorm_rows"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)  # parameters only: the kernel does the work

    def forward(self, x):
        return ext.layernorm_rows(x, self.norm.weight, self.norm.bias, self.norm.eps)
