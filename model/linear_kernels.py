"""Few-row linear layers as a split-K Triton kernel, for CUDA devices.

A denoising pass at batch 1 multiplies 8 token rows by every weight matrix: pure weight streaming. cuBLAS picks
tiles of 64-128 outputs for these shapes and so launches 32-96 programs on the H200's 132 SMs (o_proj: 32), which
leaves SMs idle and keeps too few bytes in flight: 1.4-3.2 TB/s of the copy rate's 4.2 (profile in
BENCHMARKS.md). Here the K dimension is split too, so that every SM streams a few slices of the weight at once,
and each program multiplies its weight tile [BLOCK_N, BLOCK_K] by the rows' slice with the tensor cores (the rows
padded to 16). Each split writes fp32 partial sums; the caller adds them up (`network.linear`), and under
torch.compile that sum fuses into the kernel that reads the output next (the SwiGLU, the residual add and norm,
the QK-norm/rotary kernel), so the split costs no kernel of its own. Timed alone (8 rows, 28 weights in one CUDA
graph, H200): q/k/v 5.9 against cuBLAS's 6.7 us, o_proj 4.4 against 6.1, gate/up 14.3 against 15.5, down_proj
8.1 against 10.8 (cuBLAS's split-K reduce included).
"""

import torch
import triton
import triton.language as tl

MAX_ROWS = 16  # rows (batch x queries) the kernel takes: more rows are a GEMM, cuBLAS's job
# Swept on the H200 (bench/linear_sweep.py, 8 rows, 28 weights): 64-key tiles, 4 warps, 3 stages and ~400
# programs were best or within a few % of it for the four projections of the DICE-1.7B shape.
TARGET_PROGRAMS = 384
# At most 4 splits: Inductor unrolls a sum over fewer than 8 elements (its unroll_reductions_threshold) into the
# loads of the kernel that consumes it; with 8 splits the sums were kernels of their own (profiled on the H200).
MAX_SPLITS = 4


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


def split_k_config(n_out: int, k: int, block_n: int | None = None, block_k: int = 64,
                   programs: int = TARGET_PROGRAMS) -> tuple[int, int, int] | None:
    """(BLOCK_N, BLOCK_K, splits) for an [n_out, k] weight: the fewest K splits (a power of two, at most
    MAX_SPLITS) that give at least `programs` programs; BLOCK_N 64, or 32 where 64 leaves too few programs.
    None when the shape does not tile evenly (the caller falls back to F.linear)."""
    if block_n is None:
        block_n = 64 if n_out // 64 * MAX_SPLITS >= programs else 32
    if n_out % block_n or k % block_k:
        return None
    splits = 1
    while n_out // block_n * splits < programs and splits < MAX_SPLITS and k % (block_k * splits * 2) == 0:
        splits *= 2
    return block_n, block_k, splits


# A custom op launching the kernel through Triton's own runtime, not a triton_op: Inductor compiles a user kernel
# without knowing that the weights (graph inputs) are 16-byte aligned, so without vector loads or a pipelined loop,
# and inside the compiled forward it ran 5x slower (gate/up: 71 against 14 us, H200). Triton's launcher checks the
# actual pointers. Opaque to Inductor either way (it cannot fuse into a user kernel), and captured in CUDA graphs.
@torch.library.custom_op("dice::split_k_partials", mutates_args=())
def split_k_partials(x: torch.Tensor, weight: torch.Tensor, block_n: int, block_k: int, splits: int,
                     num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    """x [R, K] (R <= MAX_ROWS) times weight [N, K] transposed, as fp32 partial sums [splits, R, N] over equal
    K slices (their sum is x @ weight.T). Needs N % block_n == 0 and K % (block_k * splits) == 0."""
    n_rows, k = x.shape
    n_out = weight.shape[0]
    out = torch.empty((splits, n_rows, n_out), device=x.device, dtype=torch.float32)
    _split_k_kernel[(n_out // block_n, splits)](
        x, weight, out, n_rows, n_out, k // splits, *x.stride(), *weight.stride(),
        BLOCK_M=MAX_ROWS, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages,
    )
    return out


@split_k_partials.register_fake
def _(x, weight, block_n, block_k, splits, num_warps=4, num_stages=3):
    return x.new_empty((splits, x.shape[0], weight.shape[0]), dtype=torch.float32)


def linear_partials(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
    """x [..., K] @ weight.T as the split-K kernel's fp32 partial sums [splits, ..., N], or None where the kernel
    does not apply (not CUDA, more than MAX_ROWS rows, a shape that does not tile): the caller uses F.linear."""
    rows = x.reshape(-1, x.shape[-1])
    config = split_k_config(*weight.shape)
    if not x.is_cuda or rows.shape[0] > MAX_ROWS or config is None or weight.stride(-1) != 1:
        return None
    partials = split_k_partials(rows.contiguous(), weight, *config)
    return partials.view(config[2], *x.shape[:-1], weight.shape[0])
