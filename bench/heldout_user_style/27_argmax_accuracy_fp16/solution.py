"""Kernel 1: one warp per row finds the maximum and, among equal maxima, the smallest index (torch.argmax's
rule; fp16 rows often hold ties), and marks whether it equals the label. Kernel 2: one block counts the marks
(an exact integer sum) and divides by the number of rows."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int WARPS = 8;

__global__ void __launch_bounds__(WARPS * 32) argmax_rows_kernel(const __half* __restrict__ logits, const int64_t* __restrict__ labels,
                                                                 int64_t* __restrict__ pred, int* __restrict__ correct,
                                                                 long long rows, int C) {
    const long long r = blockIdx.x * (long long)WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const __half* x = logits + r * C;
    float best = -INFINITY;
    int best_i = C;  // no index yet
    for (int c = lane; c < C; c += 32) {
        const float v = __half2float(x[c]);
        if (v > best || (best_i == C && v == best)) { best = v; best_i = c; }  // later columns never win a tie
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (ob > best || (ob == best && oi < best_i)) { best = ob; best_i = oi; }
    }
    if (lane == 0) {
        pred[r] = best_i;
        correct[r] = best_i == labels[r] ? 1 : 0;
    }
}

__global__ void count_kernel(const int* __restrict__ correct, long long rows, int64_t* __restrict__ count, float* __restrict__ accuracy) {
    __shared__ unsigned long long partial[32];
    unsigned long long s = 0;
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) s += (unsigned long long)correct[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += partial[w];
        count[0] = (int64_t)total;
        accuracy[0] = (float)total / (float)rows;
    }
}

std::vector<torch::Tensor> argmax_accuracy(torch::Tensor logits, torch::Tensor labels, int64_t stream) {
    TORCH_CHECK(logits.is_cuda() && logits.scalar_type() == torch::kHalf && logits.dim() == 2,
                "argmax_accuracy: (N, C) fp16 logits");
    TORCH_CHECK(labels.scalar_type() == torch::kLong && labels.numel() == logits.size(0), "argmax_accuracy: int64 (N,) labels");
    auto lc = logits.contiguous(), yc = labels.contiguous();
    const long long rows = lc.size(0);
    const int C = lc.size(1);
    auto pred = torch::empty({rows}, yc.options());
    auto correct = torch::empty({rows}, yc.options().dtype(torch::kInt));
    auto count = torch::empty({}, yc.options());
    auto accuracy = torch::empty({}, lc.options().dtype(torch::kFloat));
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (rows > 0)
        argmax_rows_kernel<<<(unsigned)((rows + WARPS - 1) / WARPS), WARPS * 32, 0, s>>>(
            reinterpret_cast<const __half*>(lc.data_ptr()), yc.data_ptr<int64_t>(), pred.data_ptr<int64_t>(),
            correct.data_ptr<int>(), rows, C);
    count_kernel<<<1, 1024, 0, s>>>(correct.data_ptr<int>(), rows, count.data_ptr<int64_t>(), accuracy.data_ptr<float>());
    return {pred, count, accuracy};
}
"""

cpp_source = "std::vector<torch::Tensor> argmax_accuracy(torch::Tensor logits, torch::Tensor labels, int64_t stream);"

ext = load_inline(name="heldout_27_argmax_accuracy_fp16", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["argmax_accuracy"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, logits, labels):
        pred, count, accuracy = ext.argmax_accuracy(logits, labels, torch.cuda.current_stream().cuda_stream)
        return pred, count, accuracy
