"""Style: bfloat16 data read as __nv_bfloat162 pairs, fp32 accumulation, warp-shuffle + shared-memory block sum."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

__global__ void rmsnorm_bf16x2_kernel(const __nv_bfloat162* __restrict__ x, const float* __restrict__ weight,
                                      __nv_bfloat162* __restrict__ y, int pairs_per_row, float eps) {
    __shared__ float warp_sums[32];
    const __nv_bfloat162* in = x + (long long)blockIdx.x * pairs_per_row;
    __nv_bfloat162* out = y + (long long)blockIdx.x * pairs_per_row;
    float sq = 0.0f;
    for (int p = threadIdx.x; p < pairs_per_row; p += blockDim.x) {
        const float2 v = __bfloat1622float2(in[p]);
        sq += v.x * v.x + v.y * v.y;
    }
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sq;
    __syncthreads();
    if (threadIdx.x < 32) {
        float total = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
        if (threadIdx.x == 0) warp_sums[0] = total;
    }
    __syncthreads();
    const float inv_rms = rsqrtf(warp_sums[0] / (2.0f * pairs_per_row) + eps);
    for (int p = threadIdx.x; p < pairs_per_row; p += blockDim.x) {
        const float2 v = __bfloat1622float2(in[p]);
        out[p] = __floats2bfloat162_rn(v.x * inv_rms * weight[2 * p], v.y * inv_rms * weight[2 * p + 1]);
    }
}

torch::Tensor rmsnorm_bf16(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && weight.scalar_type() == torch::kFloat32,
                "rmsnorm_bf16: bfloat16 input, float32 weight");
    const int hidden = x.size(-1);
    TORCH_CHECK(hidden % 2 == 0, "rmsnorm_bf16: the hidden size must be even");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int rows = input.numel() / hidden;
    rmsnorm_bf16x2_kernel<<<rows, 256>>>(reinterpret_cast<const __nv_bfloat162*>(input.data_ptr<at::BFloat16>()),
                                         weight.contiguous().data_ptr<float>(),
                                         reinterpret_cast<__nv_bfloat162*>(out.data_ptr<at::BFloat16>()),
                                         hidden / 2, (float)eps);
    return out;
}
"""

rmsnorm = load_inline(name="corpus_rmsnorm_bf16x2",
                      cpp_sources="torch::Tensor rmsnorm_bf16(torch::Tensor x, torch::Tensor weight, double eps);",
                      cuda_sources=cuda_source, functions=["rmsnorm_bf16"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return rmsnorm.rmsnorm_bf16(x, self.weight, self.eps)
