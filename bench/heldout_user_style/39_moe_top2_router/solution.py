"""Kernel 1: one thread per token computes the softmax over its experts, picks the top-k logits (ties go to the
lower expert) and writes the probabilities, the weights (a softmax over the chosen logits when normalising) and
the expert ids. Kernel 2: one block sums, expert by expert in a fixed order, the probabilities and the
first-choice counts, and forms num_experts * sum_e load_e * importance_e (deterministic, no float atomics)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256, MAX_TOP_K = 8;

__global__ void __launch_bounds__(THREADS) route_kernel(const float* __restrict__ logits, float* __restrict__ probs,
                                                        float* __restrict__ weights, int64_t* __restrict__ experts,
                                                        int tokens, int E, int K, bool normalize) {
    const int tok = blockIdx.x * THREADS + threadIdx.x;
    if (tok >= tokens) return;
    const float* x = logits + (long long)tok * E;
    float* p = probs + (long long)tok * E;
    float m = -INFINITY;
    for (int e = 0; e < E; ++e) m = fmaxf(m, x[e]);
    float z = 0.f;
    for (int e = 0; e < E; ++e) z += expf(x[e] - m);
    for (int e = 0; e < E; ++e) p[e] = expf(x[e] - m) / z;
    int chosen[MAX_TOP_K];
    for (int k = 0; k < K; ++k) {  // largest logits first; among equal logits the lower expert
        int best = -1;
        for (int e = 0; e < E; ++e) {
            bool taken = false;
            for (int j = 0; j < k; ++j) taken |= chosen[j] == e;
            if (!taken && (best < 0 || x[e] > x[best])) best = e;
        }
        chosen[k] = best;
    }
    // normalised: a softmax over the chosen logits (the first chosen is their maximum)
    float chosen_z = 0.f;
    for (int k = 0; k < K; ++k) chosen_z += expf(x[chosen[k]] - x[chosen[0]]);
    for (int k = 0; k < K; ++k) {
        weights[(long long)tok * K + k] = normalize ? expf(x[chosen[k]] - x[chosen[0]]) / chosen_z : p[chosen[k]];
        experts[(long long)tok * K + k] = chosen[k];
    }
}

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

// aux = E * sum_e (first-choice share of e) * (mean probability of e), summed in a fixed order
__global__ void __launch_bounds__(THREADS) aux_loss_kernel(const float* __restrict__ probs, const int64_t* __restrict__ experts,
                                                           float* __restrict__ aux, int tokens, int E, int K) {
    __shared__ float red[THREADS / 32 + 1];
    float total = 0.f;
    for (int e = 0; e < E; ++e) {
        float importance = 0.f, count = 0.f;
        for (int t = threadIdx.x; t < tokens; t += THREADS) {
            importance += probs[(long long)t * E + e];
            count += experts[(long long)t * K] == e ? 1.f : 0.f;
        }
        importance = block_sum(importance, red);
        count = block_sum(count, red);
        total += (count / tokens) * (importance / tokens);
    }
    if (threadIdx.x == 0) aux[0] = E * total;
}

std::vector<torch::Tensor> route_top_k(torch::Tensor logits, int64_t k, bool normalize, int64_t stream) {
    TORCH_CHECK(logits.is_cuda() && logits.scalar_type() == torch::kFloat32 && logits.dim() == 2,
                "route_top_k: (tokens, experts) float32 logits");
    const int tokens = logits.size(0), E = logits.size(1);
    TORCH_CHECK(k >= 1 && k <= E && k <= MAX_TOP_K, "route_top_k: 1 <= top_k <= min(experts, 8)");
    auto lc = logits.contiguous();
    auto probs = torch::empty({tokens, E}, lc.options());
    auto weights = torch::empty({tokens, k}, lc.options());
    auto experts = torch::empty({tokens, k}, lc.options().dtype(torch::kLong));
    auto aux = torch::empty({}, lc.options());
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (tokens > 0)
        route_kernel<<<(tokens + THREADS - 1) / THREADS, THREADS, 0, s>>>(lc.data_ptr<float>(), probs.data_ptr<float>(),
                                                                          weights.data_ptr<float>(), experts.data_ptr<int64_t>(),
                                                                          tokens, E, (int)k, normalize);
    aux_loss_kernel<<<1, THREADS, 0, s>>>(probs.data_ptr<float>(), experts.data_ptr<int64_t>(), aux.data_ptr<float>(),
                                          tokens, E, (int)k);
    return {weights, experts, aux};
}
"""

cpp_source = "std::vector<torch::Tensor> route_top_k(torch::Tensor logits, int64_t k, bool normalize, int64_t stream);"

ext = load_inline(name="heldout_39_route_top_k", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["route_top_k"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_experts: int = 8, top_k: int = 2, normalize: bool = True):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.normalize = normalize

    def forward(self, router_logits: torch.Tensor):
        weights, experts, aux_loss = ext.route_top_k(router_logits, self.top_k, self.normalize,
                                                     torch.cuda.current_stream().cuda_stream)
        return weights, experts, aux_loss
