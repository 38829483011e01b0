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

__global__ void layer_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int cols, const float* __restrict__ w, const float* __restrict__ b, float eps) {
    __shared__ float shared[32];
    const float* row = x + (long)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    float mean = block_sum(s, shared) / cols;
    float v = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float d = row[c] - mean; v += d * d; }
    float rstd = rsqrtf(block_sum(v, shared) / cols + eps);
    float* out = y + (long)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = (row[c] - mean) * rstd * w[c] + b[c];
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "x: contiguous 2-D CUDA tensor");
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    layer_norm_kernel<<<rows, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, w.data_ptr<float>(), b.data_ptr<float>(), (float)eps);
    return y;
}
"""

cpp_source = "torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

ext = load_inline(
    name="layer_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layer_norm"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return ext.layer_norm(x.contiguous(), self.norm.weight.contiguous(), self.norm.bias.contiguous(), self.norm.eps)

