// LayerNorm over the last axis: one block of 256 threads per row, statistics reduced in shared memory.
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ float block_reduce_sum(float value, float* shared) {
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    const float total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y, int cols, float eps) {
    __shared__ float shared[kThreads];
    const float* in = x + static_cast<long long>(blockIdx.x) * cols;
    float* out = y + static_cast<long long>(blockIdx.x) * cols;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) sum += in[c];
    const float mean = block_reduce_sum(sum, shared) / cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) {
        const float d = in[c] - mean;
        sq += d * d;
    }
    const float inv_std = rsqrtf(block_reduce_sum(sq, shared) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = (in[c] - mean) * inv_std * gamma[c] + beta[c];
}

}  // namespace

void launch_layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                      float eps) {
    layernorm_kernel<<<rows, kThreads>>>(x, gamma, beta, y, cols, eps);
}
