"""One block per (sample, group): the group's channels are contiguous, so it is one span of (C / G) * L values;
a two-pass fp32 mean and variance over the span, then normalise and apply the per-channel affine."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 512;

__device__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = 0.f;
        for (int w = 0; w < THREADS / 32; ++w) r += red[w];
        red[THREADS / 32] = r;
    }
    __syncthreads();
    const float result = red[THREADS / 32];
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(THREADS) group_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                             const float* __restrict__ bias, float* __restrict__ y,
                                                             int G, int channels_per_group, int L, float eps) {
    __shared__ float red[THREADS / 32 + 1];
    const long long group = blockIdx.x;  // n * G + g
    const int g = group % G;
    const long long span = (long long)channels_per_group * L;
    const float* xg = x + group * span;
    float* yg = y + group * span;
    float s = 0.f;
    for (long long i = threadIdx.x; i < span; i += THREADS) s += xg[i];
    const float mean = block_sum(s, red) / span;
    float sq = 0.f;
    for (long long i = threadIdx.x; i < span; i += THREADS) {
        const float d = xg[i] - mean;
        sq += d * d;
    }
    const float denom = sqrtf(block_sum(sq, red) / span + eps);
    for (long long i = threadIdx.x; i < span; i += THREADS) {
        const int c = g * channels_per_group + (int)(i / L);
        yg[i] = (xg[i] - mean) / denom * weight[c] + bias[c];
    }
}

torch::Tensor group_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t groups, double eps, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "group_norm: (N, C, L) float32 input");
    const int N = x.size(0), C = x.size(1), L = x.size(2);
    TORCH_CHECK(groups > 0 && C % groups == 0, "group_norm: channels must divide into the groups");
    TORCH_CHECK(weight.numel() == C && bias.numel() == C, "group_norm: one weight and bias per channel");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const long long blocks = (long long)N * groups;
    if (blocks == 0 || L == 0) return y;
    group_norm_kernel<<<(unsigned)blocks, THREADS, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), weight.contiguous().data_ptr<float>(), bias.contiguous().data_ptr<float>(),
        y.data_ptr<float>(), (int)groups, C / (int)groups, L, (float)eps);
    return y;
}
"""

cpp_source = "torch::Tensor group_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t groups, double eps, int64_t stream);"

ext = load_inline(name="heldout_30_group_norm", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["group_norm"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_groups=8, num_channels=96, eps=1e-5):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))

    def forward(self, x):
        return ext.group_norm(x, self.weight, self.bias, self.num_groups, self.eps, torch.cuda.current_stream().cuda_stream)
