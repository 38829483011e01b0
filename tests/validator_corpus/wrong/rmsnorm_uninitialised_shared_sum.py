"""Wrong (uninitialised accumulator): atomicAdd into a __shared__ total that is never zeroed."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

__global__ void rmsnorm_atomic_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
                                      __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    __shared__ float total;
    const __nv_bfloat16* in = x + (long long)blockIdx.x * hidden;
    __nv_bfloat16* out = y + (long long)blockIdx.x * hidden;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
        const float v = __bfloat162float(in[c]);
        sq += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (threadIdx.x % 32 == 0) atomicAdd(&total, sq);
    __syncthreads();
    const float inv_rms = rsqrtf(total / hidden + eps);
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
        out[c] = __float2bfloat16(__bfloat162float(in[c]) * inv_rms * w[c]);
    }
}

torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor w, double eps) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int hidden = input.size(-1);
    rmsnorm_atomic_kernel<<<input.numel() / hidden, 256>>>(
        reinterpret_cast<const __nv_bfloat16*>(input.data_ptr<at::BFloat16>()), w.data_ptr<float>(),
        reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), hidden, (float)eps);
    return out;
}
"""

ext = load_inline(name="corpus_wrong_rmsnorm_uninit", cpp_sources="torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor w, double eps);",
                  cuda_sources=cuda_source, functions=["rmsnorm"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return ext.rmsnorm(x, self.weight, self.eps)
