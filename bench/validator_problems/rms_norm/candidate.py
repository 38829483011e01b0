import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
// One block of 256 threads per row; block-wide reductions through shared memory.
__device__ float block_sum(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : 0.f;
    if (warp == 0) for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

__device__ float block_max(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : -INFINITY;
    if (warp == 0) for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int cols, const float* __restrict__ w) {
    __shared__ float shared[32];
    const float* row = x + (long)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c] * row[c];
    float r = rsqrtf(block_sum(s, shared) / cols + 1e-6f);
    float* out = y + (long)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = row[c] * r * w[c];
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "x: contiguous 2-D CUDA tensor");
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    rms_norm_kernel<<<rows, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, w.data_ptr<float>());
    return y;
}
"""

cpp_source = "torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w);"

ext = load_inline(
    name="rms_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rms_norm"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.rms_norm(x.contiguous(), self.weight.contiguous())

