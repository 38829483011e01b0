import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// One block per row. The residual sum is rounded to bf16 first (the reference keeps it in bf16), the mean of
// squares accumulates in fp32, and the normalised value is rounded to bf16 before the weight multiply, as in the
// reference.
__global__ void add_rmsnorm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ residual,
                                   const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ out,
                                   __nv_bfloat16* __restrict__ residual_out, int cols, float eps) {
    __shared__ float warp_sums[32];
    const long long base = (long long)blockIdx.x * cols;
    float sumsq = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        __nv_bfloat16 h = __float2bfloat16(__bfloat162float(x[base + c]) + __bfloat162float(residual[base + c]));
        residual_out[base + c] = h;
        float hf = __bfloat162float(h);
        sumsq += hf * hf;
    }
    for (int o = 16; o > 0; o >>= 1) sumsq += __shfl_xor_sync(0xffffffffu, sumsq, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = sumsq;
    __syncthreads();
    if (warp == 0) {
        float v = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) warp_sums[0] = v;
    }
    __syncthreads();
    const float rstd = rsqrtf(warp_sums[0] / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float normed = __bfloat162float(__float2bfloat16(__bfloat162float(residual_out[base + c]) * rstd));
        out[base + c] = __float2bfloat16(__bfloat162float(weight[c]) * normed);
    }
}

std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps,
                                       int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kBFloat16, "add_rmsnorm: x must be a bf16 CUDA tensor");
    TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type(),
                "add_rmsnorm: residual must match x");
    const int cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && weight.scalar_type() == x.scalar_type(), "add_rmsnorm: weight of hidden size");
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    auto residual_out = torch::empty_like(xc);
    const long long rows = xc.numel() / cols;
    if (rows == 0) return {out, residual_out};
    add_rmsnorm_kernel<<<(unsigned)rows, 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(rc.data_ptr()),
        reinterpret_cast<const __nv_bfloat16*>(wc.data_ptr()), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
        reinterpret_cast<__nv_bfloat16*>(residual_out.data_ptr()), cols, (float)eps);
    return {out, residual_out};
}
"""

cpp_source = ("std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, "
              "double eps, int64_t stream);")

ext = load_inline(name="heldout_add_rmsnorm_bf16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["add_rmsnorm"], extra_cuda_cflags=["-O3"])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.bfloat16))


class ModelNew(nn.Module):
    def __init__(self, hidden_size=2048, eps=1e-6):
        super().__init__()
        self.norm = RMSNorm(hidden_size, eps)

    def forward(self, hidden_states, residual):
        stream = torch.cuda.current_stream().cuda_stream
        out, new_residual = ext.add_rmsnorm(hidden_states, residual, self.norm.weight, self.norm.eps, stream)
        return out, new_residual
