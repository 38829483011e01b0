"""Style: the residual add left to PyTorch, a custom RMSNorm kernel for the rest (ide only: torch does part)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rms_source = r"""
__global__ void rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                             int cols, float eps) {
    extern __shared__ float partial[];
    const float* in = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sq += in[c] * in[c];
    partial[threadIdx.x] = sq;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c] * inv_rms * w[c];
}

torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor w, double eps) {
    auto out = torch::empty_like(x);
    const int cols = x.size(-1);
    const int rows = x.numel() / cols;
    rmsnorm_rows<<<rows, 256, 256 * sizeof(float)>>>(x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(),
                                                     cols, (float)eps);
    return out;
}
"""

rms = load_inline(name="corpus_rmsnorm_after_torch_add", cpp_sources="torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor w, double eps);",
                  cuda_sources=rms_source, functions=["rmsnorm"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x, residual):
        hidden = x + residual
        return rms.rmsnorm(hidden, self.weight, self.eps), hidden
