"""Few-token linear layers as one Triton kernel each, with the RMSNorm before them and the SwiGLU or residual add
after them fused in, for CUDA devices.

A denoising pass at batch 1 multiplies 8 tokens by every weight matrix: pure weight streaming. cuBLAS reached 1.4-3.2
TB/s of the H200's 4.2 on these shapes (run 5's profile: o_proj 8 MB in 6.2 us, down_proj 24 MB in 9.3 + 1.7 us of
split-K reduction), and each matrix came with one or two small Inductor kernels around it (the norm before, the
SiLU-times-up or the residual add after: ~15 us per layer in all). Here every program streams the weight rows of
`BLOCK_N` outputs over the whole K for all tokens (padded to 16 rows for the tensor cores), so a launch over
N = 2048 outputs already has 128 programs streaming at once, and the neighbours come along:
- `norm_weight`: the input is RMS-normalised first (Qwen3's RMSNorm: fp32 statistics, rounded to the model dtype
  before and after the weight, as `network.RMSNorm`). Each program recomputes the token rows' statistics from the
  (L2-resident, a few KB) input instead of a separate kernel writing them.
- `silu_mul`: the weight is gate rows then up rows (a fused gate/up projection); the output is silu(gate) * up.
- `residual`: added to the (rounded) output, as `x + layer(x)` in the model dtype.
Every intermediate is rounded to the model dtype where the unfused modules round it, so the result is the unfused
layers' up to the order of the K-sum.
"""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

MAX_TOKENS = 64  # rows (batch x queries) the kernel takes; more rows are a compute-bound GEMM, cuBLAS's job
# (BLOCK_M is picked by comparisons, not triton.next_power_of_2, so that a compiled caller's symbolic row count
# guards instead of failing on bit operations)
# (BLOCK_N, BLOCK_K, num_warps, num_stages): 16 outputs per program fills an H200's 132 SMs from N = 2048 on.
DEFAULT_CONFIG = (16, 256, 4, 4)


@triton.jit
def _linear_kernel(x_ptr, w_ptr, bias_ptr, norm_ptr, res_ptr, out_ptr,
                   n_rows, n_out, K, eps, up_offset,
                   sx_m, sx_k, sw_n, sw_k, sr_m, sr_n, so_m, so_n,
                   HAS_BIAS: tl.constexpr, NORM: tl.constexpr, SILU_MUL: tl.constexpr, RESIDUAL: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    dtype = out_ptr.dtype.element_ty
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_out
    ks = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rows[:, None] * sx_m
    if NORM:
        squares = tl.zeros((BLOCK_M,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + ks
            x = tl.load(x_rows + kk[None, :] * sx_k, mask=row_ok[:, None] & (EVEN_K | (kk < K))[None, :],
                        other=0.0).to(tl.float32)
            squares += tl.sum(x * x, axis=1)
        inv_rms = tl.math.rsqrt(squares / K + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + ks
        k_ok = EVEN_K | (kk < K)
        x = tl.load(x_rows + kk[None, :] * sx_k, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        if NORM:
            gamma = tl.load(norm_ptr + kk, mask=k_ok, other=0.0).to(tl.float32)
            x = (x.to(tl.float32) * inv_rms[:, None]).to(dtype)
            x = (x.to(tl.float32) * gamma[None, :]).to(dtype)
        w = tl.load(w_ptr + cols[:, None] * sw_n + kk[None, :] * sw_k, mask=col_ok[:, None] & k_ok[None, :],
                    other=0.0)
        acc = tl.dot(x, tl.trans(w), acc)
        if SILU_MUL:
            w_up = tl.load(w_ptr + (cols + up_offset)[:, None] * sw_n + kk[None, :] * sw_k,
                           mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            acc_up = tl.dot(x, tl.trans(w_up), acc_up)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    y = acc.to(dtype).to(tl.float32)
    if SILU_MUL:
        if HAS_BIAS:
            acc_up += tl.load(bias_ptr + cols + up_offset, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        up = acc_up.to(dtype).to(tl.float32)
        y = (y * tl.sigmoid(y)).to(dtype).to(tl.float32) * up
    if RESIDUAL:
        residual = tl.load(res_ptr + rows[:, None] * sr_m + cols[None, :] * sr_n,
                           mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        y = y.to(dtype).to(tl.float32) + residual.to(tl.float32)
    tl.store(out_ptr + rows[:, None] * so_m + cols[None, :] * so_n, y.to(dtype), mask=row_ok[:, None] & col_ok[None, :])


@triton_op("dice::few_token_linear", mutates_args={})
def few_token_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
                     residual: torch.Tensor | None = None, silu_mul: bool = False,
                     config: list[int] | None = None) -> torch.Tensor:
    """[..., K] x weight [N, K] -> [..., N] (or [..., N/2] with silu_mul), for at most MAX_TOKENS rows:
    y = rmsnorm(x) @ weight.T + bias (rmsnorm when norm_weight is given), then silu(y[:N/2]) * y[N/2:] (silu_mul),
    then y + residual. config: (BLOCK_N, BLOCK_K, num_warps, num_stages), DEFAULT_CONFIG when None (benchmarks
    sweep it)."""
    k = x.shape[-1]
    rows = x.reshape(-1, k)
    n_rows = rows.shape[0]
    if n_rows > MAX_TOKENS:
        raise ValueError(f"few_token_linear takes at most {MAX_TOKENS} rows, got {n_rows}")
    n_out = weight.shape[0] // 2 if silu_mul else weight.shape[0]
    out = torch.empty((n_rows, n_out), device=x.device, dtype=x.dtype)
    res = residual.reshape(n_rows, n_out) if residual is not None else None
    block_n, block_k, num_warps, num_stages = config or DEFAULT_CONFIG
    unused = weight  # stands in for the pointers the flags below switch off (never read; never the output)
    wrap_triton(_linear_kernel)[(triton.cdiv(n_out, block_n),)](
        rows, weight, unused if bias is None else bias, unused if norm_weight is None else norm_weight,
        unused if res is None else res, out, n_rows, n_out, k, eps, n_out, *rows.stride(), *weight.stride(),
        *((0, 0) if res is None else res.stride()), *out.stride(),
        HAS_BIAS=bias is not None, NORM=norm_weight is not None, SILU_MUL=silu_mul, RESIDUAL=residual is not None,
        BLOCK_M=16 if n_rows <= 16 else 32 if n_rows <= 32 else 64, BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=k % block_k == 0, num_warps=num_warps, num_stages=num_stages,
    )
    return out.view(*x.shape[:-1], n_out)
