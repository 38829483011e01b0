"""Few-query attention over a KV cache as one Triton kernel pair (split-K "flash decoding"), for CUDA devices.

A denoising pass has 8 queries per row (two blocks) against up to thousands of cached keys. As two batched matmuls
with a separate softmax this took ~21 us per layer on an H200 (the scores matmul alone picked a 12.5 us cuBLAS
kernel) for ~2 MB of keys and values: a latency problem, not a bandwidth one. Here every program takes one tile of
keys for one KV head and all the query rows that read it (its query heads × queries, padded to 16 rows for the
tensor cores), so the keys are spread over the whole GPU; a second kernel merges the tiles' partial softmax sums.
The tile shrinks until there are enough programs to fill the GPU (`keys_per_program`). Swept on the H200 (28
layers' calls in one CUDA graph, 1k keys): batch 1 took 10.1 / 10.5 / 9.6 / 11.9 us per layer with 128 / 64 / 32 /
16-key tiles, batch 16 took 41.2 / 47.8 / 51.7 / 78.9 us: small tiles only pay while programs are few. The mask is
read as given (any boolean [B, 1, Q, K] mask), so the result is the same function as
`network.small_query_attention`, up to rounding.
"""

import functools
import math

import torch
import triton
import triton.language as tl

from .few_row_linear import pdl_supported
from .kernel_switches import SWITCHES

TILE_SIZES = (128, 64, 32, 16)  # keys per program, largest first (tl.dot needs at least 16)
# Programs wanted per launch, about two per SM of an H200 (132 SMs): batch 1 over 1k keys gets 32-key tiles,
# batch 16 keeps 128-key ones (the sweep above).
TARGET_PROGRAMS = 256
MERGE_CHUNK = 64  # tiles the merge kernel reads at once
# Programmatic dependent launch (PDL): each kernel here is launched while the one before it drains and waits
# (griddepcontrol.wait) before reading anything, which hides its launch gap. On the H200 the batch-1 forward
# took 1.792 ms with it and 1.832 ms without (BENCHMARKS.md, decode run 12). DICE_PDL=0 turns it off
# (few_row_linear.PDL_ALLOWED).


@functools.cache
def uses_pdl(device: torch.device) -> bool:
    """Whether kernels on `device` launch with PDL: where few_row_linear.pdl_supported, with a Triton that has it
    (3.3 on)."""
    return hasattr(tl.extra.cuda, "gdc_wait") and pdl_supported(device)


def pdl_launch(pdl: bool) -> dict:
    """Launch options for a kernel here: an older Triton rejects the PDL option even when off."""
    return {"launch_pdl": True} if pdl else {}


# The tile and merge kernels let the next kernel launch before their own wait (LAUNCH_NEXT_FIRST): the merge
# kernel's programs, then the next layer's chain kernel (few_row_linear), are resident while the tile kernel runs,
# so the chain's weight stream starts a kernel earlier. Batch-1 forward on the H200, alternated with the old order in
# four commands: 1.480 / 1.495 / 1.487 / 1.514 ms against 1.493 / 1.505 / 1.504 / 1.517 (BENCHMARKS.md, decode run
# 19). The rotary kernel waits first: letting it go first as well launched the chain while the layer before was
# still running, and lost (1.547 ms).
# DICE_ATTENTION_LAUNCH_NEXT_FIRST=0 turns it off.
LAUNCH_NEXT_FIRST = SWITCHES.attention_launch_next_first


@triton.jit
def _follow_previous_kernel(PDL: tl.constexpr, NEXT_FIRST: tl.constexpr):
    """With PDL: wait until the kernel before has finished (its writes visible), and let the next one launch (before
    the wait with NEXT_FIRST, after it otherwise). Called first, before anything is read."""
    if PDL:
        if NEXT_FIRST:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        else:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()


def keys_per_program(n_keys: int, n_heads_total: int) -> int:
    """The largest tile that still gives TARGET_PROGRAMS programs over `n_heads_total` (batch x KV heads)."""
    for size in TILE_SIZES:
        if n_heads_total * -(-n_keys // size) >= TARGET_PROGRAMS:
            return size
    return TILE_SIZES[-1]


@triton.jit
def _tile_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, acc_ptr, max_ptr, sum_ptr,
                 n_keys, n_tiles, scale,
                 sq_b, sq_h, sq_q, sq_d, sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d, sm_b, sm_q, sm_n,
                 N_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, N_QUERIES: tl.constexpr, ROWS: tl.constexpr,
                 HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr, NEXT_FIRST: tl.constexpr):
    _follow_previous_kernel(PDL, NEXT_FIRST)
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // N_KV_HEADS
    kv_head = bh % N_KV_HEADS
    rows = tl.arange(0, ROWS)
    real = rows < GROUP * N_QUERIES
    head = kv_head * GROUP + rows // N_QUERIES
    query = rows % N_QUERIES
    dims = tl.arange(0, HEAD_DIM)
    keys = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    in_range = keys < n_keys

    q = tl.load(q_ptr + b * sq_b + head[:, None] * sq_h + query[:, None] * sq_q + dims[None, :] * sq_d,
                mask=real[:, None], other=0.0)
    k = tl.load(k_ptr + b * sk_b + kv_head * sk_h + keys[:, None] * sk_n + dims[None, :] * sk_d,
                mask=in_range[:, None], other=0.0)
    # Issued before the softmax needs it, so the K and V loads are in flight together.
    v = tl.load(v_ptr + b * sv_b + kv_head * sv_h + keys[:, None] * sv_n + dims[None, :] * sv_d,
                mask=in_range[:, None], other=0.0)
    scores = tl.dot(q, tl.trans(k)) * scale
    allowed = tl.load(mask_ptr + b * sm_b + query[:, None] * sm_q + keys[None, :] * sm_n,
                      mask=real[:, None] & in_range[None, :], other=0)
    scores = tl.where(allowed != 0, scores, float("-inf"))
    row_max = tl.max(scores, axis=1)
    safe_max = tl.where(row_max == float("-inf"), 0.0, row_max)  # a fully masked tile contributes nothing
    p = tl.exp(scores - safe_max[:, None])
    acc = tl.dot(p.to(v.dtype), v)

    part = bh * n_tiles + tile
    tl.store(acc_ptr + (part * ROWS + rows[:, None]) * HEAD_DIM + dims[None, :], acc)
    tl.store(max_ptr + part * ROWS + rows, row_max)
    tl.store(sum_ptr + part * ROWS + rows, tl.sum(p, axis=1))


@triton.jit
def _merge_kernel(acc_ptr, max_ptr, sum_ptr, out_ptr, n_tiles,
                  so_b, so_h, so_q, so_d,
                  N_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, N_QUERIES: tl.constexpr, ROWS: tl.constexpr,
                  HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr, PDL: tl.constexpr, NEXT_FIRST: tl.constexpr):
    _follow_previous_kernel(PDL, NEXT_FIRST)
    row = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // N_KV_HEADS
    kv_head = bh % N_KV_HEADS
    dims = tl.arange(0, HEAD_DIM)
    # 0-d loop-carried values, made by reducing (Triton wants their type fixed before the loop).
    best = tl.max(tl.full((CHUNK,), float("-inf"), tl.float32), axis=0)
    total = tl.sum(tl.zeros((CHUNK,), tl.float32), axis=0)
    out = tl.zeros((HEAD_DIM,), tl.float32)
    for start in range(0, n_tiles, CHUNK):
        tiles = start + tl.arange(0, CHUNK)
        present = tiles < n_tiles
        part = bh * n_tiles + tiles
        maxes = tl.load(max_ptr + part * ROWS + row, mask=present, other=float("-inf"))
        new_best = tl.maximum(best, tl.max(maxes, axis=0))
        safe = tl.where(new_best == float("-inf"), 0.0, new_best)
        weights = tl.where(maxes == float("-inf"), 0.0, tl.exp(maxes - safe))
        rescale = tl.where(best == float("-inf"), 0.0, tl.exp(best - safe))
        sums = tl.load(sum_ptr + part * ROWS + row, mask=present, other=0.0)
        accs = tl.load(acc_ptr + (part[:, None] * ROWS + row) * HEAD_DIM + dims[None, :],
                       mask=present[:, None], other=0.0)
        total = total * rescale + tl.sum(weights * sums, axis=0)
        out = out * rescale + tl.sum(weights[:, None] * accs, axis=0)
        best = new_best
    head = kv_head * GROUP + row // N_QUERIES
    query = row % N_QUERIES
    tl.store(out_ptr + b * so_b + head * so_h + query * so_q + dims * so_d, (out / total).to(out_ptr.dtype.element_ty))


# A custom op that launches through Triton's own runtime, where launch options such as PDL apply (Inductor
# launching a wrapped kernel itself drops them); Inductor could not fuse into these kernels anyway.
@torch.library.custom_op("dice::few_query_attention", mutates_args=())
def few_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                        n_kv_heads: int, tile_keys: int = 0) -> torch.Tensor:
    """Grouped-query attention: q [B,Hq,Q,D], k/v [B,Hkv,K,D] (any strides, e.g. views of a cache), mask bool
    [B,1,Q,K] -> [B,Hq,Q,D] in q's dtype. Query head h reads kv head h // (Hq / Hkv). tile_keys: keys per
    program, one of TILE_SIZES (0: `keys_per_program` picks; benchmarks sweep it)."""
    b, n_heads, n_queries, head_dim = q.shape
    n_keys = k.shape[2]
    group = n_heads // n_kv_heads
    rows = max(16, triton.next_power_of_2(group * n_queries))
    tile_keys = tile_keys or keys_per_program(n_keys, b * n_kv_heads)
    n_tiles = (n_keys + tile_keys - 1) // tile_keys
    parts = b * n_kv_heads * n_tiles
    acc = torch.empty((parts, rows, head_dim), device=q.device, dtype=torch.float32)
    maxes = torch.empty((parts, rows), device=q.device, dtype=torch.float32)
    sums = torch.empty((parts, rows), device=q.device, dtype=torch.float32)
    # Laid out [B, Q, Hq, D] (returned as its [B, Hq, Q, D] view): the caller's transpose back for o_proj is free.
    out = torch.empty((b, n_queries, n_heads, head_dim), device=q.device, dtype=q.dtype).transpose(1, 2)
    mask = mask.view(torch.uint8)  # the same bytes, which Triton reads as integers; 8 KB per row at 1k keys
    pdl = uses_pdl(q.device)
    _tile_kernel[(n_tiles, b * n_kv_heads)](
        q, k, v, mask, acc, maxes, sums, n_keys, n_tiles, 1.0 / math.sqrt(head_dim),
        *q.stride(), *k.stride(), *v.stride(), mask.stride(0), mask.stride(2), mask.stride(3),
        N_KV_HEADS=n_kv_heads, GROUP=group, N_QUERIES=n_queries, ROWS=rows, HEAD_DIM=head_dim,
        BLOCK_N=tile_keys, PDL=pdl, NEXT_FIRST=LAUNCH_NEXT_FIRST, **pdl_launch(pdl),
    )
    _merge_kernel[(group * n_queries, b * n_kv_heads)](
        acc, maxes, sums, out, n_tiles, *out.stride(),
        N_KV_HEADS=n_kv_heads, GROUP=group, N_QUERIES=n_queries, ROWS=rows, HEAD_DIM=head_dim, CHUNK=MERGE_CHUNK,
        PDL=pdl, NEXT_FIRST=LAUNCH_NEXT_FIRST, **pdl_launch(pdl),
    )
    return out


@few_query_attention.register_fake
def _(q, k, v, mask, n_kv_heads, tile_keys=0):
    b, n_heads, n_queries, head_dim = q.shape
    return q.new_empty((b, n_queries, n_heads, head_dim)).transpose(1, 2)


@triton.jit
def _qk_norm_rotary_cache_kernel(qkv_ptr, q_weight_ptr, k_weight_ptr, cos_ptr, sin_ptr, pos_ptr,
                                 q_out_ptr, k_cache_ptr, v_cache_ptr, n_queries, eps,
                                 s_qkv_b, s_qkv_q, s_cos_b, s_cos_q, s_pos_b, s_pos_q,
                                 sk_b, sk_h, sk_n, sv_b, sv_h, sv_n,
                                 N_HEADS: tl.constexpr, N_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                                 PDL: tl.constexpr):
    _follow_previous_kernel(PDL, False)
    row = tl.program_id(0)  # one query token of one batch row
    head = tl.program_id(1)  # q heads, then k heads, then v heads, as laid out in the fused projection
    b = row // n_queries
    query = row % n_queries
    half = tl.arange(0, HEAD_DIM // 2)
    src = qkv_ptr + b * s_qkv_b + query * s_qkv_q + head * HEAD_DIM
    x1 = tl.load(src + half).to(tl.float32)
    x2 = tl.load(src + HEAD_DIM // 2 + half).to(tl.float32)
    dtype = q_out_ptr.dtype.element_ty
    position = tl.load(pos_ptr + b * s_pos_b + query * s_pos_q)
    if head >= N_HEADS + N_KV_HEADS:  # a value head: into the cache as it is
        dst = v_cache_ptr + b * sv_b + (head - N_HEADS - N_KV_HEADS) * sv_h + position * sv_n
        tl.store(dst + half, x1.to(dtype))
        tl.store(dst + HEAD_DIM // 2 + half, x2.to(dtype))
    else:
        # RMSNorm as network.RMSNorm: fp32 statistics, rounded to the model dtype before and after the weight.
        inv_rms = tl.math.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM + eps)
        is_query = head < N_HEADS
        weight_ptr = q_weight_ptr if is_query else k_weight_ptr
        w1 = tl.load(weight_ptr + half).to(tl.float32)
        w2 = tl.load(weight_ptr + HEAD_DIM // 2 + half).to(tl.float32)
        n1 = ((x1 * inv_rms).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
        n2 = ((x2 * inv_rms).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
        # Rotary (network.apply_rotary): x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
        trig = b * s_cos_b + query * s_cos_q
        c1 = tl.load(cos_ptr + trig + half).to(tl.float32)
        c2 = tl.load(cos_ptr + trig + HEAD_DIM // 2 + half).to(tl.float32)
        s1 = tl.load(sin_ptr + trig + half).to(tl.float32)
        s2 = tl.load(sin_ptr + trig + HEAD_DIM // 2 + half).to(tl.float32)
        o1 = (n1 * c1 - n2 * s1).to(dtype)
        o2 = (n2 * c2 + n1 * s2).to(dtype)
        if is_query:
            dst = q_out_ptr + (row * N_HEADS + head) * HEAD_DIM
        else:
            dst = k_cache_ptr + b * sk_b + (head - N_HEADS) * sk_h + position * sk_n
        tl.store(dst + half, o1)
        tl.store(dst + HEAD_DIM // 2 + half, o2)


def qk_norm_rotary_cache(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         n_heads: int, n_kv_heads: int, eps: float) -> torch.Tensor:
    """network.qk_norm_rotary_cache as one kernel: a program per (token, head) normalises and rotates a query or
    key head, or copies a value head, and writes keys and values straight into the cache (one launch in place of
    Inductor's separate kernels for these steps). The head dim must be a power of two."""
    b, n_queries, _ = qkv.shape
    head_dim = k_cache.shape[-1]
    q_out = torch.empty((b, n_queries, n_heads, head_dim), device=qkv.device, dtype=qkv.dtype)
    pdl = uses_pdl(qkv.device)
    _qk_norm_rotary_cache_kernel[(b * n_queries, n_heads + 2 * n_kv_heads)](
        qkv, q_weight, k_weight, cos, sin, positions, q_out, k_cache, v_cache, n_queries, eps,
        qkv.stride(0), qkv.stride(1), cos.stride(0), cos.stride(-2), positions.stride(0), positions.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), N_HEADS=n_heads, N_KV_HEADS=n_kv_heads, HEAD_DIM=head_dim, PDL=pdl, num_warps=1,
        **pdl_launch(pdl),
    )
    return q_out
