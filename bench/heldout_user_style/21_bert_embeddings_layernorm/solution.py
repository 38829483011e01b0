"""Eval path (dropout is the identity). One block per token: the word, token-type and position rows are gathered
and added in the reference's order, kept in registers, and LayerNorm-ed with a two-pass fp32 mean and variance."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 128, MAX_PER_THREAD = 8;  // hidden sizes up to 1024

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

__global__ void __launch_bounds__(THREADS) embeddings_kernel(const int64_t* __restrict__ input_ids, const int64_t* __restrict__ type_ids,
                                                             const float* __restrict__ word, const float* __restrict__ pos,
                                                             const float* __restrict__ type, const float* __restrict__ gamma,
                                                             const float* __restrict__ beta, float* __restrict__ out,
                                                             int T, int D, float eps) {
    __shared__ float red[THREADS / 32 + 1];
    const long long token = blockIdx.x;
    const int t = token % T;
    const float* w = word + input_ids[token] * (long long)D;
    const float* ty = type + type_ids[token] * (long long)D;
    const float* p = pos + (long long)t * D;
    float v[MAX_PER_THREAD];
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < MAX_PER_THREAD; ++k) {
        const int d = threadIdx.x + k * THREADS;
        v[k] = d < D ? (w[d] + ty[d]) + p[d] : 0.f;
        s += v[k];
    }
    const float mean = block_sum(s, red) / D;
    float sq = 0.f;
    #pragma unroll
    for (int k = 0; k < MAX_PER_THREAD; ++k) {
        const int d = threadIdx.x + k * THREADS;
        const float c = d < D ? v[k] - mean : 0.f;
        sq += c * c;
    }
    const float rstd = rsqrtf(block_sum(sq, red) / D + eps);
    float* o = out + token * D;
    #pragma unroll
    for (int k = 0; k < MAX_PER_THREAD; ++k) {
        const int d = threadIdx.x + k * THREADS;
        if (d < D) o[d] = (v[k] - mean) * rstd * gamma[d] + beta[d];
    }
}

torch::Tensor bert_embeddings(torch::Tensor input_ids, torch::Tensor token_type_ids, torch::Tensor word,
                              torch::Tensor pos, torch::Tensor type, torch::Tensor gamma, torch::Tensor beta, double eps,
                              int64_t stream) {
    TORCH_CHECK(input_ids.is_cuda() && input_ids.scalar_type() == torch::kLong && input_ids.dim() == 2,
                "bert_embeddings: int64 (B, T) input ids");
    TORCH_CHECK(token_type_ids.sizes() == input_ids.sizes() && token_type_ids.scalar_type() == torch::kLong,
                "bert_embeddings: token type ids like input ids");
    const int B = input_ids.size(0), T = input_ids.size(1), D = word.size(1);
    TORCH_CHECK(D <= THREADS * MAX_PER_THREAD, "bert_embeddings: hidden size at most 1024");
    TORCH_CHECK(T <= pos.size(0), "bert_embeddings: sequence longer than the position table");
    auto out = torch::empty({B, T, D}, word.options());
    if ((long long)B * T == 0) return out;
    embeddings_kernel<<<(unsigned)((long long)B * T), THREADS, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        input_ids.contiguous().data_ptr<int64_t>(), token_type_ids.contiguous().data_ptr<int64_t>(),
        word.contiguous().data_ptr<float>(), pos.contiguous().data_ptr<float>(), type.contiguous().data_ptr<float>(),
        gamma.contiguous().data_ptr<float>(), beta.contiguous().data_ptr<float>(), out.data_ptr<float>(), T, D, (float)eps);
    return out;
}
"""

cpp_source = ("torch::Tensor bert_embeddings(torch::Tensor input_ids, torch::Tensor token_type_ids, torch::Tensor word, "
              "torch::Tensor pos, torch::Tensor type, torch::Tensor gamma, torch::Tensor beta, double eps, int64_t stream);")

ext = load_inline(name="heldout_21_bert_embeddings", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["bert_embeddings"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, vocab_size=8192, hidden_size=256, max_position=512, type_vocab_size=2, eps=1e-12, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, input_ids, token_type_ids):
        return ext.bert_embeddings(input_ids, token_type_ids, self.word_embeddings.weight,
                                   self.position_embeddings.weight, self.token_type_embeddings.weight,
                                   self.LayerNorm.weight, self.LayerNorm.bias, self.LayerNorm.eps,
                                   torch.cuda.current_stream().cuda_stream)
