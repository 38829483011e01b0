"""Channels are strided by H*W in NCHW, so one thread per pixel normalises over them without any permute copy:
neighbouring threads take neighbouring pixels, so every channel's loads are coalesced. fp32 two-pass statistics;
the output is written in NCHW (the reference's permuted view has the same values)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void layernorm_channels_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                                          const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ y,
                                          int N, int C, int HW, float eps) {
    const long long pixel = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (pixel >= (long long)N * HW) return;
    const long long n = pixel / HW;
    const int p = pixel % HW;
    const __nv_bfloat16* xp = x + n * C * HW + p;
    __nv_bfloat16* yp = y + n * C * HW + p;
    float s = 0.f;
    for (int c = 0; c < C; ++c) s += __bfloat162float(xp[(long long)c * HW]);
    const float mean = s / C;
    float sq = 0.f;
    for (int c = 0; c < C; ++c) {
        const float d = __bfloat162float(xp[(long long)c * HW]) - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(sq / C + eps);
    for (int c = 0; c < C; ++c) {
        const float v = (__bfloat162float(xp[(long long)c * HW]) - mean) * rstd;
        yp[(long long)c * HW] = __float2bfloat16(v * __bfloat162float(weight[c]) + __bfloat162float(bias[c]));
    }
}

torch::Tensor layernorm_channels(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kBFloat16 && x.dim() == 4, "layernorm_channels: (N, C, H, W) bf16 input");
    const int N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(weight.numel() == C && bias.numel() == C && weight.scalar_type() == torch::kBFloat16,
                "layernorm_channels: bf16 weight and bias per channel");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const long long pixels = (long long)N * HW;
    if (pixels == 0 || C == 0) return y;
    const int threads = 128;
    layernorm_channels_kernel<<<(unsigned)((pixels + threads - 1) / threads), threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(weight.contiguous().data_ptr()),
        reinterpret_cast<const __nv_bfloat16*>(bias.contiguous().data_ptr()), reinterpret_cast<__nv_bfloat16*>(y.data_ptr()),
        N, C, HW, (float)eps);
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_channels(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps, int64_t stream);"

ext = load_inline(name="heldout_35_layernorm_channels_bf16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["layernorm_channels"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_channels, dtype=torch.bfloat16))
        self.bias = nn.Parameter(torch.zeros(num_channels, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layernorm_channels(x, self.weight, self.bias, self.eps, torch.cuda.current_stream().cuda_stream)
