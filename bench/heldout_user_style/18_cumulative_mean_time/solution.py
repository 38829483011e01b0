"""Time is the middle axis, so one thread per (batch, feature) column scans it sequentially in fp32; neighbouring
threads read neighbouring features, so every step's loads are coalesced."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void cumulative_mean_kernel(const float* __restrict__ x, float* __restrict__ y, int B, int T, int D) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= (long long)B * D) return;
    const long long b = col / D;
    const int d = col % D;
    const float* xp = x + b * T * D + d;
    float* yp = y + b * T * D + d;
    float s = 0.f;
    #pragma unroll 8
    for (int t = 0; t < T; ++t) {
        s += xp[(long long)t * D];
        yp[(long long)t * D] = s / (float)(t + 1);
    }
}

torch::Tensor cumulative_mean(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "cumulative_mean: (B, T, D) float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int B = xc.size(0), T = xc.size(1), D = xc.size(2);
    const long long cols = (long long)B * D;
    if (cols == 0 || T == 0) return y;
    const int threads = 128;
    cumulative_mean_kernel<<<(unsigned)((cols + threads - 1) / threads), threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), B, T, D);
    return y;
}
"""

cpp_source = "torch::Tensor cumulative_mean(torch::Tensor x, int64_t stream);"

ext = load_inline(name="heldout_18_cumulative_mean", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["cumulative_mean"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.cumulative_mean(x, torch.cuda.current_stream().cuda_stream)
