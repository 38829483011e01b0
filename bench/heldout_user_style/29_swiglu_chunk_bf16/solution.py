"""Elementwise over the output (rows x half-width): the value half and the gate half of each row are read from
their two column ranges; silu(gate) is rounded to bf16 before the product, as the reference's two bf16 ops."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void swiglu_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, long long n, int half_width) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / half_width;
        const int c = i % half_width;
        const __nv_bfloat16* xr = x + row * 2 * half_width;
        const float value = __bfloat162float(xr[c]);
        const float gate = __bfloat162float(xr[c + half_width]);
        const float act = __bfloat162float(__float2bfloat16(gate / (1.f + expf(-gate))));
        y[i] = __float2bfloat16(act * value);
    }
}

torch::Tensor swiglu(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kBFloat16, "swiglu: bf16 CUDA input");
    const int width = x.size(-1);
    TORCH_CHECK(width % 2 == 0, "swiglu: the last dimension must be even");
    auto xc = x.contiguous();
    auto sizes = xc.sizes().vec();
    sizes.back() = width / 2;
    auto y = torch::empty(sizes, xc.options());
    const long long n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int blocks = (int)std::min<long long>((n + threads - 1) / threads, 8192);
    swiglu_kernel<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr()), reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), n, width / 2);
    return y;
}
"""

cpp_source = "torch::Tensor swiglu(torch::Tensor x, int64_t stream);"

ext = load_inline(name="heldout_29_swiglu_bf16", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["swiglu"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.swiglu(x, torch.cuda.current_stream().cuda_stream)
