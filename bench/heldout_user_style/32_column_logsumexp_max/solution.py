"""Kernel 1: the rows are cut into chunks of 256; for each (chunk, column) one thread keeps the running maximum,
its first row and the sum of exp(x - max) (rescaled when the maximum grows). Kernel 2: per column, the chunks
are merged in row order: the first chunk holding the overall maximum gives the index, and the sums are rescaled
to the overall maximum before the log."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int CHUNK = 256, THREADS = 128;

__global__ void column_partial_kernel(const float* __restrict__ x, float* __restrict__ part_max, float* __restrict__ part_sum,
                                      int64_t* __restrict__ part_idx, int R, int C) {
    const int c = blockIdx.x * THREADS + threadIdx.x;
    const int chunk = blockIdx.y;
    if (c >= C) return;
    const int r0 = chunk * CHUNK, r1 = min(R, r0 + CHUNK);
    float m = -INFINITY, s = 0.f;
    int64_t idx = r0;
    for (int r = r0; r < r1; ++r) {
        const float v = x[(long long)r * C + c];
        if (v > m) {
            s = s * expf(m - v) + 1.f;
            m = v;
            idx = r;
        } else {
            s += expf(v - m);
        }
    }
    const long long o = (long long)chunk * C + c;
    part_max[o] = m;
    part_sum[o] = s;
    part_idx[o] = idx;
}

__global__ void column_merge_kernel(const float* __restrict__ part_max, const float* __restrict__ part_sum,
                                    const int64_t* __restrict__ part_idx, float* __restrict__ lse, float* __restrict__ values,
                                    int64_t* __restrict__ indices, int chunks, int C) {
    const int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= C) return;
    float m = -INFINITY;
    int64_t idx = 0;
    for (int k = 0; k < chunks; ++k) {
        const float v = part_max[(long long)k * C + c];
        if (v > m || k == 0) { m = v; idx = part_idx[(long long)k * C + c]; }
    }
    float s = 0.f;
    for (int k = 0; k < chunks; ++k) {
        const float v = part_max[(long long)k * C + c];
        s += part_sum[(long long)k * C + c] * expf(v - m);
    }
    lse[c] = m + logf(s);
    values[c] = m;
    indices[c] = idx;
}

std::vector<torch::Tensor> column_stats(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "column_stats: (R, C) float32 input");
    TORCH_CHECK(x.size(0) > 0, "column_stats: max over an empty dimension");
    auto xc = x.contiguous();
    const int R = xc.size(0), C = xc.size(1);
    const int chunks = (R + CHUNK - 1) / CHUNK;
    auto opts = xc.options();
    auto part_max = torch::empty({chunks, C}, opts);
    auto part_sum = torch::empty({chunks, C}, opts);
    auto part_idx = torch::empty({chunks, C}, opts.dtype(torch::kLong));
    auto lse = torch::empty({C}, opts);
    auto values = torch::empty({C}, opts);
    auto indices = torch::empty({C}, opts.dtype(torch::kLong));
    if (C == 0) return {lse, values, indices};
    auto s = reinterpret_cast<cudaStream_t>(stream);
    column_partial_kernel<<<dim3((C + THREADS - 1) / THREADS, chunks), THREADS, 0, s>>>(
        xc.data_ptr<float>(), part_max.data_ptr<float>(), part_sum.data_ptr<float>(), part_idx.data_ptr<int64_t>(), R, C);
    column_merge_kernel<<<(C + THREADS - 1) / THREADS, THREADS, 0, s>>>(
        part_max.data_ptr<float>(), part_sum.data_ptr<float>(), part_idx.data_ptr<int64_t>(), lse.data_ptr<float>(),
        values.data_ptr<float>(), indices.data_ptr<int64_t>(), chunks, C);
    return {lse, values, indices};
}
"""

cpp_source = "std::vector<torch::Tensor> column_stats(torch::Tensor x, int64_t stream);"

ext = load_inline(name="heldout_32_column_stats", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["column_stats"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        lse, values, indices = ext.column_stats(x, torch.cuda.current_stream().cuda_stream)
        return lse, values, indices
