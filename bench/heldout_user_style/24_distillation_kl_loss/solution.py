"""Kernel 1: one block per example computes three logsumexps (student/T, teacher/T, student), the row's KL term
sum_c p_c (log p_c - log q_c) with p the teacher's tempered softmax, and the row's cross-entropy. Kernel 2: one
block combines them: alpha * T^2 * sum(KL) / batch + (1 - alpha) * mean(CE)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

template <bool IS_MAX>
__device__ float block_reduce(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, other) : v + other;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = red[0];
        for (int w = 1; w < THREADS / 32; ++w) r = IS_MAX ? fmaxf(r, red[w]) : r + red[w];
        red[THREADS / 32] = r;
    }
    __syncthreads();
    const float result = red[THREADS / 32];
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(THREADS) distill_rows_kernel(const float* __restrict__ student, const float* __restrict__ teacher,
                                                               const int64_t* __restrict__ labels, float* __restrict__ kl_rows,
                                                               float* __restrict__ ce_rows, int C, float T) {
    __shared__ float red[THREADS / 32 + 1];
    const long long r = blockIdx.x;
    const float* s = student + r * C;
    const float* t = teacher + r * C;
    float ms = -INFINITY, mt = -INFINITY;
    for (int c = threadIdx.x; c < C; c += THREADS) { ms = fmaxf(ms, s[c]); mt = fmaxf(mt, t[c]); }
    ms = block_reduce<true>(ms, red);
    mt = block_reduce<true>(mt, red);
    const float ms_t = ms / T, mt_t = mt / T;  // division by T > 0 keeps the maximum
    float zs_t = 0.f, zt_t = 0.f, zs = 0.f;
    for (int c = threadIdx.x; c < C; c += THREADS) {
        zs_t += expf(s[c] / T - ms_t);
        zt_t += expf(t[c] / T - mt_t);
        zs += expf(s[c] - ms);
    }
    zs_t = block_reduce<false>(zs_t, red);
    zt_t = block_reduce<false>(zt_t, red);
    zs = block_reduce<false>(zs, red);
    const float lse_s_t = ms_t + logf(zs_t), lse_t_t = mt_t + logf(zt_t);
    float kl = 0.f;
    for (int c = threadIdx.x; c < C; c += THREADS) {
        const float log_p = t[c] / T - lse_t_t;
        const float p = expf(log_p);
        if (p > 0.f) kl += p * (log_p - (s[c] / T - lse_s_t));
    }
    kl = block_reduce<false>(kl, red);
    if (threadIdx.x == 0) {
        kl_rows[r] = kl;
        ce_rows[r] = ms + logf(zs) - s[labels[r]];
    }
}

__global__ void __launch_bounds__(THREADS) combine_kernel(const float* __restrict__ kl_rows, const float* __restrict__ ce_rows,
                                                          float* __restrict__ out, int rows, float T, float alpha) {
    __shared__ float red[THREADS / 32 + 1];
    float kl = 0.f, ce = 0.f;
    for (int r = threadIdx.x; r < rows; r += THREADS) { kl += kl_rows[r]; ce += ce_rows[r]; }
    kl = block_reduce<false>(kl, red);
    ce = block_reduce<false>(ce, red);
    if (threadIdx.x == 0) out[0] = alpha * (kl / rows * (T * T)) + (1.f - alpha) * (ce / rows);
}

torch::Tensor distillation_loss(torch::Tensor student, torch::Tensor teacher, torch::Tensor labels, double T,
                                double alpha, int64_t stream) {
    TORCH_CHECK(student.is_cuda() && student.scalar_type() == torch::kFloat32 && student.dim() == 2,
                "distillation_loss: (N, C) float32 student logits");
    TORCH_CHECK(teacher.sizes() == student.sizes() && teacher.scalar_type() == torch::kFloat32,
                "distillation_loss: teacher logits like the student's");
    TORCH_CHECK(labels.scalar_type() == torch::kLong && labels.numel() == student.size(0), "distillation_loss: int64 (N,) labels");
    TORCH_CHECK(T > 0, "distillation_loss: the temperature must be positive");
    auto sc = student.contiguous(), tc = teacher.contiguous(), lc = labels.contiguous();
    const int rows = sc.size(0), C = sc.size(1);
    auto kl_rows = torch::empty({rows}, sc.options());
    auto ce_rows = torch::empty({rows}, sc.options());
    auto out = torch::empty({}, sc.options());
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (rows > 0)
        distill_rows_kernel<<<rows, THREADS, 0, s>>>(sc.data_ptr<float>(), tc.data_ptr<float>(), lc.data_ptr<int64_t>(),
                                                     kl_rows.data_ptr<float>(), ce_rows.data_ptr<float>(), C, (float)T);
    combine_kernel<<<1, THREADS, 0, s>>>(kl_rows.data_ptr<float>(), ce_rows.data_ptr<float>(), out.data_ptr<float>(),
                                         rows, (float)T, (float)alpha);
    return out;
}
"""

cpp_source = ("torch::Tensor distillation_loss(torch::Tensor student, torch::Tensor teacher, torch::Tensor labels, "
              "double T, double alpha, int64_t stream);")

ext = load_inline(name="heldout_24_distillation_loss", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["distillation_loss"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, temperature: float = 4.0, alpha: float = 0.7):
        super().__init__()
        self.temperature = temperature
        self.alpha = alpha

    def forward(self, student_logits, teacher_logits, labels):
        return ext.distillation_loss(student_logits, teacher_logits, labels, self.temperature, self.alpha,
                                     torch.cuda.current_stream().cuda_stream)
