"""Few-row linear layers as a split-K Triton kernel, for CUDA devices.

A denoising pass at batch 1 multiplies 8 token rows by every weight matrix: pure weight streaming. cuBLAS picks
tiles of 64-128 outputs for these shapes and so launches 32-96 programs on the H200's 132 SMs (o_proj: 32), which
leaves SMs idle and keeps too few bytes in flight: 1.4-3.2 TB/s of the copy rate's 4.2 (profile in
BENCHMARKS.md). Here the K dimension is split too, so that every SM streams a few slices of the weight at once,
and each program multiplies its weight tile [BLOCK_N, BLOCK_K] by the rows' slice with the tensor cores (the rows
padded to 16). Each split writes fp32 partial sums; the caller adds them up (`few_row_linear`), and under
torch.compile that sum fuses into the kernel that reads the output next (the SwiGLU, the residual add and norm),
so the split costs no kernel of its own.
"""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

MAX_ROWS = 16  # rows (batch x queries) the kernel takes: more rows are a GEMM, cuBLAS's job
TARGET_PROGRAMS = 264  # two per SM of an H200


@triton.jit
def _split_k_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_out, k_per_split, sx_m, sx_k, sw_n, sw_k,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    ks = split * k_per_split + tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    for _step in range(0, k_per_split, BLOCK_K):
        w = tl.load(w_ptr + cols[:, None] * sw_n + ks[None, :] * sw_k)
        x = tl.load(x_ptr + rows[None, :] * sx_m + ks[:, None] * sx_k, mask=row_ok[None, :], other=0.0)
        acc = tl.dot(w, x, acc)
        ks += BLOCK_K
    out = out_ptr + (split * n_rows + rows[None, :]) * n_out + cols[:, None]
    tl.store(out, acc, mask=row_ok[None, :])


def split_k_config(n_out: int, k: int, block_n: int = 64, block_k: int = 128,
                   programs: int = TARGET_PROGRAMS) -> tuple[int, int, int] | None:
    """(BLOCK_N, BLOCK_K, splits) for an [n_out, k] weight: the fewest K splits (a power of two) that give at
    least `programs` programs; None when the shape does not tile evenly (the caller falls back to F.linear)."""
    if n_out % block_n or k % block_k:
        return None
    splits = 1
    while n_out // block_n * splits < programs and k % (block_k * splits * 2) == 0:
        splits *= 2
    return block_n, block_k, splits


@triton_op("dice::split_k_partials", mutates_args={})
def split_k_partials(x: torch.Tensor, weight: torch.Tensor, block_n: int, block_k: int, splits: int,
                     num_warps: int = 4, num_stages: int = 4) -> torch.Tensor:
    """x [R, K] (R <= MAX_ROWS) times weight [N, K] transposed, as fp32 partial sums [splits, R, N] over equal
    K slices (their sum is x @ weight.T). Needs N % block_n == 0 and K % (block_k * splits) == 0."""
    n_rows, k = x.shape
    n_out = weight.shape[0]
    out = torch.empty((splits, n_rows, n_out), device=x.device, dtype=torch.float32)
    wrap_triton(_split_k_kernel)[(n_out // block_n, splits)](
        x, weight, out, n_rows, n_out, k // splits, *x.stride(), *weight.stride(),
        BLOCK_M=MAX_ROWS, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages,
    )
    return out


def few_row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for a few rows on a GPU through the split-K kernel, F.linear otherwise. The
    partial sums are added in fp32 and rounded once, as a GEMM's accumulator is."""
    rows = x.reshape(-1, x.shape[-1])
    config = split_k_config(*weight.shape)
    if not x.is_cuda or rows.shape[0] > MAX_ROWS or config is None:
        return torch.nn.functional.linear(x, weight, bias)
    out = split_k_partials(rows, weight, *config).sum(0)
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).view(*x.shape[:-1], weight.shape[0])
