"""One thread per environment walks its trajectory backwards. Every product and sum is rounded as the reference
rounds it (explicit round-to-nearest intrinsics, so no fused multiply-add changes the result)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void discounted_returns_kernel(const float* __restrict__ rewards, const bool* __restrict__ dones,
                                         const float* __restrict__ bootstrap, float* __restrict__ returns,
                                         int envs, int T, float gamma) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= envs) return;
    const long long base = (long long)e * T;
    float running = bootstrap[e];
    #pragma unroll 8
    for (int t = T - 1; t >= 0; --t) {
        const float keep = dones[base + t] ? 0.f : 1.f;
        running = __fadd_rn(rewards[base + t], __fmul_rn(__fmul_rn(gamma, running), keep));
        returns[base + t] = running;
    }
}

torch::Tensor discounted_returns(torch::Tensor rewards, torch::Tensor dones, torch::Tensor bootstrap, double gamma,
                                 int64_t stream) {
    TORCH_CHECK(rewards.is_cuda() && rewards.scalar_type() == torch::kFloat32 && rewards.dim() == 2,
                "discounted_returns: rewards is (envs, T) float32");
    TORCH_CHECK(dones.scalar_type() == torch::kBool && dones.sizes() == rewards.sizes(), "discounted_returns: bool dones like rewards");
    TORCH_CHECK(bootstrap.scalar_type() == torch::kFloat32 && bootstrap.numel() == rewards.size(0),
                "discounted_returns: one bootstrap value per environment");
    auto rc = rewards.contiguous(), dc = dones.contiguous(), bc = bootstrap.contiguous();
    auto returns = torch::empty_like(rc);
    const int envs = rc.size(0), T = rc.size(1);
    if (envs == 0 || T == 0) return returns;
    const int threads = 128;
    discounted_returns_kernel<<<(envs + threads - 1) / threads, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        rc.data_ptr<float>(), dc.data_ptr<bool>(), bc.data_ptr<float>(), returns.data_ptr<float>(), envs, T, (float)gamma);
    return returns;
}
"""

cpp_source = ("torch::Tensor discounted_returns(torch::Tensor rewards, torch::Tensor dones, torch::Tensor bootstrap, "
              "double gamma, int64_t stream);")

ext = load_inline(name="heldout_17_discounted_returns", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["discounted_returns"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, gamma: float = 0.99):
        super().__init__()
        self.gamma = gamma

    def forward(self, rewards, dones, bootstrap_value):
        return ext.discounted_returns(rewards, dones, bootstrap_value, self.gamma, torch.cuda.current_stream().cuda_stream)
