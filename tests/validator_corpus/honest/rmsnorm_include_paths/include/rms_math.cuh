// Device helpers shared by this folder's kernels (found through load_inline's extra_include_paths).
#pragma once
#include <cuda_bf16.h>

namespace rms_math {

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Sum over a block whose size is a multiple of 32 (at most 1024 threads); every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* scratch32) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) scratch32[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = (threadIdx.x & 31) < (blockDim.x >> 5) ? scratch32[threadIdx.x & 31] : 0.0f;
    total = warp_sum(total);
    return total;
}

}  // namespace rms_math
