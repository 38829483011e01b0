"""One block per (image, channel) plane: a two-pass mean and variance in fp32 over the plane (read through L2),
then the normalised, affine-transformed values are written back as bf16."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int THREADS = 256;

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

__global__ void __launch_bounds__(THREADS) instance_norm_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ gamma,
                                                                const float* __restrict__ beta, __nv_bfloat16* __restrict__ y,
                                                                int C, int HW, float eps, bool affine) {
    __shared__ float red[THREADS / 32 + 1];
    const long long plane = blockIdx.x;
    const int c = plane % C;
    const __nv_bfloat16* xp = x + plane * HW;
    __nv_bfloat16* yp = y + plane * HW;
    float s = 0.f;
    for (int i = threadIdx.x; i < HW; i += THREADS) s += __bfloat162float(xp[i]);
    const float mean = block_sum(s, red) / HW;
    float sq = 0.f;
    for (int i = threadIdx.x; i < HW; i += THREADS) {
        const float d = __bfloat162float(xp[i]) - mean;
        sq += d * d;
    }
    const float var = block_sum(sq, red) / HW;
    const float denom = sqrtf(var + eps);
    const float g = affine ? gamma[c] : 1.f, b = affine ? beta[c] : 0.f;
    for (int i = threadIdx.x; i < HW; i += THREADS) {
        float v = (__bfloat162float(xp[i]) - mean) / denom;
        if (affine) v = v * g + b;
        yp[i] = __float2bfloat16(v);
    }
}

torch::Tensor instance_norm(torch::Tensor img, torch::Tensor gamma, torch::Tensor beta, double eps, bool affine,
                            int64_t stream) {
    TORCH_CHECK(img.is_cuda() && img.scalar_type() == torch::kBFloat16 && img.dim() == 4,
                "instance_norm: (N, C, H, W) bf16 CUDA input");
    const int C = img.size(1);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C && gamma.scalar_type() == torch::kFloat32,
                "instance_norm: float32 gamma/beta with one value per channel");
    auto xc = img.contiguous();
    auto y = torch::empty_like(xc);
    const int HW = xc.size(2) * xc.size(3);
    const long long planes = (long long)xc.size(0) * C;
    if (planes == 0 || HW == 0) return y;
    instance_norm_kernel<<<(unsigned)planes, THREADS, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr()), gamma.contiguous().data_ptr<float>(),
        beta.contiguous().data_ptr<float>(), reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), C, HW, (float)eps, affine);
    return y;
}
"""

cpp_source = ("torch::Tensor instance_norm(torch::Tensor img, torch::Tensor gamma, torch::Tensor beta, double eps, "
              "bool affine, int64_t stream);")

ext = load_inline(name="heldout_09_instance_norm_bf16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["instance_norm"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, channels, eps=1e-5, affine=True):
        super().__init__()
        self.eps = eps
        self.affine = affine
        self.gamma = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, img):
        return ext.instance_norm(img, self.gamma, self.beta, self.eps, self.affine,
                                 torch.cuda.current_stream().cuda_stream)
