"""Wrong: the fused kernel normalises x + residual but writes the old x as the new residual stream."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void add_rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ residual,
                                   const float* __restrict__ weight, float* __restrict__ normed,
                                   float* __restrict__ hidden_out, int cols, float eps) {
    __shared__ float warp_sums[32];
    const long long offset = (long long)blockIdx.x * cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float h = x[offset + c] + residual[offset + c];
        hidden_out[offset + c] = x[offset + c];
        sq += h * h;
    }
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sq;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < blockDim.x / 32; ++w) total += warp_sums[w];
    const float inv_rms = rsqrtf(total / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        normed[offset + c] = (x[offset + c] + residual[offset + c]) * inv_rms * weight[c];
    }
}

std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps) {
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto hidden = torch::empty_like(xc);
    auto normed = torch::empty_like(xc);
    const int cols = xc.size(-1);
    add_rmsnorm_kernel<<<xc.numel() / cols, 256>>>(xc.data_ptr<float>(), rc.data_ptr<float>(), weight.data_ptr<float>(),
                                                   normed.data_ptr<float>(), hidden.data_ptr<float>(), cols, (float)eps);
    return {normed, hidden};
}
"""

ext = load_inline(name="corpus_wrong_residual",
                  cpp_sources="std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps);",
                  cuda_sources=cuda_source, functions=["add_rmsnorm"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x, residual):
        normed, hidden = ext.add_rmsnorm(x, residual, self.weight, self.eps)
        return normed, hidden
