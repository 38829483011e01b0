"""Kernel 1 zeroes the counts. Kernel 2: a binary search of each value over the sorted boundaries (in shared
memory), written as int64; each block histograms its bucket ids in shared memory and adds them to the global
counts with integer atomics (exact, so the counts are deterministic)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256, MAX_BOUNDARIES = 4096;

__global__ void zero_counts_kernel(unsigned long long* __restrict__ counts, int bins) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) counts[b] = 0ull;
}

// right == false: the number of boundaries < v (torch.bucketize's default); right == true: the number <= v.
__global__ void __launch_bounds__(THREADS) bucketize_kernel(const float* __restrict__ x, const float* __restrict__ boundaries,
                                                            int nb, bool right, int64_t* __restrict__ ids,
                                                            unsigned long long* __restrict__ counts, long long n) {
    __shared__ float bounds[MAX_BOUNDARIES];
    __shared__ unsigned int hist[MAX_BOUNDARIES + 1];
    for (int i = threadIdx.x; i < nb; i += THREADS) bounds[i] = boundaries[i];
    for (int i = threadIdx.x; i <= nb; i += THREADS) hist[i] = 0u;
    __syncthreads();
    for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
        const float v = x[i];
        int lo = 0, hi = nb;  // first boundary that is >= v (or > v when right)
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            const bool before = right ? bounds[mid] <= v : bounds[mid] < v;
            if (before) lo = mid + 1; else hi = mid;
        }
        ids[i] = lo;
        atomicAdd(&hist[lo], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b <= nb; b += THREADS)
        if (hist[b]) atomicAdd(&counts[b], (unsigned long long)hist[b]);
}

std::vector<torch::Tensor> bucketize_count(torch::Tensor x, torch::Tensor boundaries, bool right, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "bucketize_count: float32 CUDA input");
    TORCH_CHECK(boundaries.dim() == 1 && boundaries.scalar_type() == torch::kFloat32, "bucketize_count: 1-D float32 boundaries");
    const int nb = boundaries.numel();
    TORCH_CHECK(nb <= MAX_BOUNDARIES, "bucketize_count: at most 4096 boundaries");
    auto xc = x.contiguous();
    auto bc = boundaries.contiguous();
    auto ids = torch::empty(xc.sizes(), xc.options().dtype(torch::kLong));
    auto counts = torch::empty({nb + 1}, xc.options().dtype(torch::kLong));
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto* counts_ptr = reinterpret_cast<unsigned long long*>(counts.data_ptr<int64_t>());
    zero_counts_kernel<<<1, THREADS, 0, s>>>(counts_ptr, nb + 1);
    const long long n = xc.numel();
    if (n > 0) {
        const int blocks = (int)std::min<long long>((n + THREADS - 1) / THREADS, 1024);
        bucketize_kernel<<<blocks, THREADS, 0, s>>>(xc.data_ptr<float>(), bc.data_ptr<float>(), nb, right,
                                                    ids.data_ptr<int64_t>(), counts_ptr, n);
    }
    return {ids, counts};
}
"""

cpp_source = "std::vector<torch::Tensor> bucketize_count(torch::Tensor x, torch::Tensor boundaries, bool right, int64_t stream);"

ext = load_inline(name="heldout_07_bucketize_count", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["bucketize_count"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_bins: int = 16, low: float = -3.0, high: float = 3.0, right: bool = False):
        super().__init__()
        self.right = right
        self.register_buffer("boundaries", torch.linspace(low, high, num_bins - 1))

    def forward(self, x):
        ids, counts = ext.bucketize_count(x, self.boundaries, self.right, torch.cuda.current_stream().cuda_stream)
        return ids, counts
