"""Kernel 1: a tiled fp32 GEMM whose A tile is gathered straight from the image (row = (image, patch row, patch
column), column = (channel, y, x) inside the patch, the reference's permute order), with the bias and the
position embedding added and each result written one row down, leaving row 0 for the class token. Kernel 2
writes cls_token + pos_embed[0] for every image."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256;

__global__ void __launch_bounds__(THREADS) patch_proj_kernel(const float* __restrict__ img, const float* __restrict__ w,
                                                             const float* __restrict__ bias, const float* __restrict__ pos,
                                                             float* __restrict__ out, int B, int C, int H, int W, int p,
                                                             int D) {
    __shared__ float as[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    const int grid_w = W / p, patches = (H / p) * grid_w, K = C * p * p, M = B * patches;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
            const int r = i / BK, k = i % BK, gk = k0 + k, m = row0 + r;
            float av = 0.f;
            if (gk < K && m < M) {
                const int b = m / patches, patch = m % patches, py = patch / grid_w, px = patch % grid_w;
                const int c = gk / (p * p), iy = (gk / p) % p, ix = gk % p;
                av = img[(((long long)b * C + c) * H + py * p + iy) * W + px * p + ix];
            }
            as[k][r] = av;
            ws[k][r] = (gk < K && col0 + r < D) ? w[(long long)(col0 + r) * K + gk] : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[4], wv[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = as[k][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) wv[j] = ws[k][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = row0 + ty + 16 * i;
        if (m >= M) continue;
        const int b = m / patches, token = m % patches + 1;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = col0 + tx + 16 * j;
            if (n >= D) continue;
            out[((long long)b * (patches + 1) + token) * D + n] = (acc[i][j] + bias[n]) + pos[(long long)token * D + n];
        }
    }
}

__global__ void cls_rows_kernel(const float* __restrict__ cls, const float* __restrict__ pos, float* __restrict__ out,
                                int B, int tokens, int D) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= (long long)B * D) return;
    const long long b = i / D;
    const int n = i % D;
    out[b * tokens * D + n] = cls[n] + pos[n];
}

torch::Tensor patch_embed(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor cls, torch::Tensor pos,
                          int64_t patch, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "patch_embed: (B, C, H, W) float32 images");
    const int B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), p = patch, D = w.size(0);
    TORCH_CHECK(H % p == 0 && W % p == 0, "patch_embed: image sides must be multiples of the patch size");
    const int patches = (H / p) * (W / p);
    TORCH_CHECK(w.size(1) == C * p * p && bias.numel() == D && cls.numel() == D && pos.numel() == (long long)(patches + 1) * D,
                "patch_embed: parameter shapes do not match the image");
    auto xc = x.contiguous();
    auto out = torch::empty({B, patches + 1, D}, xc.options());
    if (B == 0) return out;
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto wc = w.contiguous(), pc = pos.contiguous();
    const int M = B * patches;
    patch_proj_kernel<<<dim3((D + BN - 1) / BN, (M + BM - 1) / BM), THREADS, 0, s>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bias.contiguous().data_ptr<float>(), pc.data_ptr<float>(),
        out.data_ptr<float>(), B, C, H, W, p, D);
    cls_rows_kernel<<<(unsigned)(((long long)B * D + 255) / 256), 256, 0, s>>>(
        cls.contiguous().data_ptr<float>(), pc.data_ptr<float>(), out.data_ptr<float>(), B, patches + 1, D);
    return out;
}
"""

cpp_source = ("torch::Tensor patch_embed(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor cls, "
              "torch::Tensor pos, int64_t patch, int64_t stream);")

ext = load_inline(name="heldout_41_patch_embed", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["patch_embed"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, img_size=96, patch_size=8, in_chans=3, embed_dim=384):
        super().__init__()
        self.patch_size = patch_size
        num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))

    def forward(self, x):
        return ext.patch_embed(x, self.proj.weight, self.proj.bias, self.cls_token, self.pos_embed, self.patch_size,
                               torch.cuda.current_stream().cuda_stream)
