"""A 16x16 tile of (x row, y row) pairs per block: the two sets of rows are staged in shared memory 32 features
at a time and each thread accumulates one squared distance in fp32; the kernel value and the distance are
written from it. The length-scale parameter is read on the device (no host synchronisation)."""
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int TILE = 16, CHUNK = 32;

__global__ void rbf_kernel(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ log_ls,
                           float* __restrict__ K, float* __restrict__ dist, int N, int M, int D, float outputscale) {
    __shared__ float xs[TILE][CHUNK + 1];
    __shared__ float ys[TILE][CHUNK + 1];
    const int i = blockIdx.y * TILE + threadIdx.y, j = blockIdx.x * TILE + threadIdx.x;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    float acc = 0.f;
    for (int d0 = 0; d0 < D; d0 += CHUNK) {
        for (int e = tid; e < TILE * CHUNK; e += TILE * TILE) {
            const int r = e / CHUNK, d = d0 + e % CHUNK;
            const int xi = blockIdx.y * TILE + r, yj = blockIdx.x * TILE + r;
            xs[r][e % CHUNK] = (xi < N && d < D) ? x[(long long)xi * D + d] : 0.f;
            ys[r][e % CHUNK] = (yj < M && d < D) ? y[(long long)yj * D + d] : 0.f;
        }
        __syncthreads();
        #pragma unroll 8
        for (int d = 0; d < CHUNK; ++d) {
            const float diff = xs[threadIdx.y][d] - ys[threadIdx.x][d];
            acc += diff * diff;
        }
        __syncthreads();
    }
    if (i < N && j < M) {
        const float ls = expf(log_ls[0]);
        K[(long long)i * M + j] = outputscale * expf(-0.5f * acc / (ls * ls));
        dist[(long long)i * M + j] = sqrtf(acc);
    }
}

std::vector<torch::Tensor> rbf(torch::Tensor x, torch::Tensor y, torch::Tensor log_lengthscale, double outputscale,
                               int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "rbf: x is (N, D) float32");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && y.dim() == 2 && y.size(1) == x.size(1), "rbf: y is (M, D) float32");
    TORCH_CHECK(log_lengthscale.numel() == 1, "rbf: a scalar log length-scale");
    auto xc = x.contiguous(), yc = y.contiguous();
    const int N = xc.size(0), M = yc.size(0), D = xc.size(1);
    auto K = torch::empty({N, M}, xc.options());
    auto dist = torch::empty({N, M}, xc.options());
    if (N == 0 || M == 0) return {K, dist};
    dim3 block(TILE, TILE), grid((M + TILE - 1) / TILE, (N + TILE - 1) / TILE);
    rbf_kernel<<<grid, block, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
        xc.data_ptr<float>(), yc.data_ptr<float>(), log_lengthscale.data_ptr<float>(), K.data_ptr<float>(),
        dist.data_ptr<float>(), N, M, D, (float)outputscale);
    return {K, dist};
}
"""

cpp_source = ("std::vector<torch::Tensor> rbf(torch::Tensor x, torch::Tensor y, torch::Tensor log_lengthscale, "
              "double outputscale, int64_t stream);")

ext = load_inline(name="heldout_16_rbf", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["rbf"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, lengthscale: float = 2.0, outputscale: float = 1.5):
        super().__init__()
        self.log_lengthscale = nn.Parameter(torch.tensor(math.log(lengthscale)))
        self.outputscale = outputscale

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        K, dist = ext.rbf(x, y, self.log_lengthscale, self.outputscale, torch.cuda.current_stream().cuda_stream)
        return K, dist
