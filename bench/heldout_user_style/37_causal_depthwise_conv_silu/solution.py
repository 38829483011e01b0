"""One thread per (batch, time, channel) output, channels fastest (coalesced in the (B, T, C) layout the module
receives, so the transposes cost nothing): bias + sum_k w[c, k] * x[t - (K - 1) + k] over the taps inside the
sequence, then SiLU."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void causal_dwconv_silu_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                          float* __restrict__ y, long long n, int T, int C, int K) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int c = i % C;
        const long long bt = i / C;
        const int t = bt % T;
        const long long b = bt / T;
        float acc = bias ? bias[c] : 0.f;
        for (int k = 0; k < K; ++k) {
            const int src = t - (K - 1) + k;
            if (src >= 0) acc += w[c * K + k] * x[(b * T + src) * C + c];
        }
        y[i] = acc / (1.f + expf(-acc));
    }
}

torch::Tensor causal_dwconv_silu(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "causal_dwconv_silu: (B, T, C) float32 input");
    const int B = x.size(0), T = x.size(1), C = x.size(2);
    TORCH_CHECK(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1, "causal_dwconv_silu: depthwise (C, 1, K) weight");
    const int K = weight.size(2);
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto y = torch::empty_like(xc);
    const long long n = xc.numel();
    if (n == 0) return y;
    const float* bias_ptr = bias.has_value() ? bias->data_ptr<float>() : nullptr;
    const int threads = 256;
    const int blocks = (int)std::min<long long>((n + threads - 1) / threads, 8192);
    causal_dwconv_silu_kernel<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bias_ptr, y.data_ptr<float>(), n, T, C, K);
    return y;
}
"""

cpp_source = "torch::Tensor causal_dwconv_silu(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, int64_t stream);"

ext = load_inline(name="heldout_37_causal_dwconv_silu", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["causal_dwconv_silu"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, channels: int = 256, kernel_size: int = 4):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1, bias=True)

    def forward(self, x):
        return ext.causal_dwconv_silu(x, self.conv.weight, self.conv.bias, torch.cuda.current_stream().cuda_stream)
