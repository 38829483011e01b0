"""Elementwise over NCHW: each block handles one (n, c) plane slice, reads the channel's four statistics once, and
applies the same operations in the same order as the reference (no fused multiply-adds, so results round alike)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS) frozen_bn_relu_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                                                 const float* __restrict__ var, const float* __restrict__ weight,
                                                                 const float* __restrict__ bias, float* __restrict__ y,
                                                                 int C, int HW, float eps) {
    const long long plane = blockIdx.y;  // n * C + c
    const int c = plane % C;
    const float m = mean[c], inv_std = rsqrtf(__fadd_rn(var[c], eps)), w = weight[c], b = bias[c];
    const float* xp = x + plane * HW;
    float* yp = y + plane * HW;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < HW; i += gridDim.x * THREADS) {
        const float v = __fmul_rn(__fsub_rn(xp[i], m), inv_std);
        yp[i] = fmaxf(__fadd_rn(__fmul_rn(v, w), b), 0.f);
    }
}

torch::Tensor frozen_bn_relu(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight,
                             torch::Tensor bias, double eps, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "frozen_bn_relu: (N, C, H, W) float32");
    const int C = x.size(1);
    TORCH_CHECK(mean.numel() == C && var.numel() == C && weight.numel() == C && bias.numel() == C,
                "frozen_bn_relu: one statistic per channel");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int HW = xc.size(2) * xc.size(3);
    const long long planes = (long long)xc.size(0) * C;
    if (planes == 0 || HW == 0) return y;
    TORCH_CHECK(planes <= 65535, "frozen_bn_relu: at most 65535 (n, c) planes");
    dim3 grid((HW + THREADS - 1) / THREADS, (unsigned)planes);
    frozen_bn_relu_kernel<<<grid, THREADS, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), mean.contiguous().data_ptr<float>(), var.contiguous().data_ptr<float>(),
        weight.contiguous().data_ptr<float>(), bias.contiguous().data_ptr<float>(), y.data_ptr<float>(), C, HW, (float)eps);
    return y;
}
"""

cpp_source = ("torch::Tensor frozen_bn_relu(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight, "
              "torch::Tensor bias, double eps, int64_t stream);")

ext = load_inline(name="heldout_08_frozen_bn_relu", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["frozen_bn_relu"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))

    def forward(self, x):
        return ext.frozen_bn_relu(x, self.running_mean, self.running_var, self.weight, self.bias, self.eps,
                                  torch.cuda.current_stream().cuda_stream)
