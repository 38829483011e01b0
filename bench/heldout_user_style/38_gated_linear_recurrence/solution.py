"""One thread per (batch, channel) runs the recurrence over time; channels are the fastest axis, so each step's
loads and stores are coalesced across the warp. The gate, the two products and the sum round as the reference's
separate tensor ops do (explicit round-to-nearest intrinsics, no fused multiply-add)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void gated_recurrence_kernel(const float* __restrict__ x, const float* __restrict__ gate,
                                        const float* __restrict__ decay_bias, float* __restrict__ out, int B, int T, int D) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= (long long)B * D) return;
    const long long b = col / D;
    const int d = col % D;
    const float bias = decay_bias[d];
    float h = 0.f;
    #pragma unroll 4
    for (int t = 0; t < T; ++t) {
        const long long i = (b * T + t) * D + d;
        const float a = 1.f / (1.f + expf(-__fadd_rn(gate[i], bias)));
        h = __fadd_rn(__fmul_rn(a, h), __fmul_rn(__fsub_rn(1.f, a), x[i]));
        out[i] = h;
    }
}

torch::Tensor gated_recurrence(torch::Tensor x, torch::Tensor gate, torch::Tensor decay_bias, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "gated_recurrence: (B, T, D) float32 x");
    TORCH_CHECK(gate.sizes() == x.sizes() && gate.scalar_type() == torch::kFloat32, "gated_recurrence: gate like x");
    const int B = x.size(0), T = x.size(1), D = x.size(2);
    TORCH_CHECK(decay_bias.numel() == D, "gated_recurrence: one decay bias per channel");
    auto xc = x.contiguous(), gc = gate.contiguous();
    auto out = torch::empty_like(xc);
    const long long cols = (long long)B * D;
    if (cols == 0 || T == 0) return out;
    const int threads = 128;
    gated_recurrence_kernel<<<(unsigned)((cols + threads - 1) / threads), threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), gc.data_ptr<float>(), decay_bias.contiguous().data_ptr<float>(), out.data_ptr<float>(), B, T, D);
    return out;
}
"""

cpp_source = "torch::Tensor gated_recurrence(torch::Tensor x, torch::Tensor gate, torch::Tensor decay_bias, int64_t stream);"

ext = load_inline(name="heldout_38_gated_recurrence", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["gated_recurrence"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.decay_bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return ext.gated_recurrence(x, gate, self.decay_bias, torch.cuda.current_stream().cuda_stream)
