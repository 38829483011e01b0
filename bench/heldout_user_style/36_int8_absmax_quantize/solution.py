"""One block per row: the row's absolute maximum (exact), the scale max(amax, 1e-8) * (1 / qmax) -- a CUDA tensor
divided by a Python number is computed as a multiplication by its float reciprocal -- then each code is
round-half-to-even(x / scale) clamped to +-qmax, with a true division as for the reference's tensor divisor."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS) absmax_quant_kernel(const float* __restrict__ x, int8_t* __restrict__ q,
                                                               float* __restrict__ scale_out, int cols, float qmax) {
    __shared__ float red[THREADS / 32];
    __shared__ float row_scale;
    const float* xr = x + (long long)blockIdx.x * cols;
    int8_t* qr = q + (long long)blockIdx.x * cols;
    float m = 0.f;
    for (int c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, fabsf(xr[c]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = red[0];
        for (int w = 1; w < THREADS / 32; ++w) r = fmaxf(r, red[w]);
        const float s = __fmul_rn(fmaxf(r, 1e-8f), __fdiv_rn(1.f, qmax));
        row_scale = s;
        scale_out[blockIdx.x] = s;
    }
    __syncthreads();
    const float s = row_scale;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        const float v = rintf(__fdiv_rn(xr[c], s));
        qr[c] = (int8_t)fminf(fmaxf(v, -qmax), qmax);
    }
}

std::vector<torch::Tensor> absmax_quantize(torch::Tensor x, int64_t qmax, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "absmax_quantize: float32 CUDA input");
    TORCH_CHECK(qmax >= 1 && qmax <= 127, "absmax_quantize: int8 codes need 1 <= qmax <= 127");
    auto xc = x.contiguous();
    const int cols = xc.size(-1);
    const long long rows = cols ? xc.numel() / cols : 0;
    auto q = torch::empty(xc.sizes(), xc.options().dtype(torch::kChar));
    auto scale_sizes = xc.sizes().vec();
    scale_sizes.back() = 1;
    auto scale = torch::empty(scale_sizes, xc.options());
    if (rows == 0) return {q, scale};
    absmax_quant_kernel<<<(unsigned)rows, THREADS, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), q.data_ptr<int8_t>(), scale.data_ptr<float>(), cols, (float)qmax);
    return {q, scale};
}
"""

cpp_source = "std::vector<torch::Tensor> absmax_quantize(torch::Tensor x, int64_t qmax, int64_t stream);"

ext = load_inline(name="heldout_36_absmax_quantize", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["absmax_quantize"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, bits: int = 8):
        super().__init__()
        self.qmax = 2 ** (bits - 1) - 1

    def forward(self, x):
        q, scale = ext.absmax_quantize(x, self.qmax, torch.cuda.current_stream().cuda_stream)
        return q, scale
