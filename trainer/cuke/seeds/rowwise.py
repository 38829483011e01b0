"""Row-wise families: reductions over the last or a middle dim (sum, mean, max, min, norms, var/std, logsumexp,
prod, argmax/argmin), softmax / log-softmax / masked softmax, layer / RMS / L2 norms and standardisation, channel
norms on [N, C, H, W], cosine similarity and pairwise distance, and scans.

Last-dim kernels map rows to threads in one of two ways (a block per row, reducing with warp shuffles, a
shared-memory tree or CUB; or a warp per row, shuffles only), chosen by the row length; softmax also comes as an
online (one-pass statistics) kernel and with the row cached in shared memory, layer norm with Welford statistics.
Templates write the mapping with tokens (@ROW_SETUP@, @TID@, @NT@, @RSUM@, @RMAX@, @RMIN@, @LEADER@, @LAUNCH@)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .codestyle import MODES_ALL
from .elementwise import pick_dtype
from .ops import cf, chain_cuda, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .render import (FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cdiv, cuda_prelude,
                     grid_1d, host_checks, make_pair, ptr, tensor_input)

ROW_SHAPES = [(4096, 512), (2048, 1024), (1024, 2048), (512, 4096), (256, 8192), (8192, 256), (16384, 128),
              (4000, 1000), (333, 3000), (128, 16384), (8192, 64), (32768, 32), (2048, 768), (4096, 384)]
MID_SHAPES = [(64, 256, 512), (32, 512, 256), (16, 1024, 1024), (128, 64, 2048), (8, 4096, 256), (50, 300, 700),
              (16, 197, 384), (8, 128, 4096)]


def row_threads(cols: int) -> int:
    """Enough threads to cover a row in one or two strides, as a multiple of the warp size."""
    t = 32
    while t < cols and t < 512:
        t *= 2
    return max(t, 64)


def pick_rows(rng: random.Random) -> tuple[list[str], dict[str, int], int]:
    if rng.random() < 0.65:
        b, d = rng.choice(ROW_SHAPES)
        return ["batch_size", "dim"], {"batch_size": b, "dim": d}, d
    b, s, d = rng.choice(MID_SHAPES)
    return ["batch_size", "seq_len", "dim"], {"batch_size": b, "seq_len": s, "dim": d}, d


def row_mapping(rng: random.Random, cols: int, block_only: bool = False) -> tuple[str, str]:
    """(row mode, reduction flavour): short rows favour a warp per row, long rows a block per row."""
    warp_weight = 0 if block_only else (3.0 if cols <= 256 else 1.5 if cols <= 1024 else 0.4)
    if rng.random() < warp_weight / (warp_weight + 2.0):
        return "warp", "warp_only"
    return "block", rng.choices(["warp_shuffle", "smem_tree", "cub"], [3, 2, 2])[0]


def map_rows(text: str, mode: str, threads: int) -> str:
    """Resolve the row-mapping tokens of a template for a block or a warp per row."""
    if mode == "block":
        subs = {"@ROW_SETUP@": "const int64_t row = blockIdx.x;\n    if (row >= rows) return;",
                "@TID@": "threadIdx.x", "@NT@": "blockDim.x", "@RSUM@": "block_sum", "@RMAX@": "block_max",
                "@RMIN@": "block_min", "@LEADER@": "threadIdx.x == 0",
                "@LAUNCH@": f"(unsigned)rows, {threads}"}
    else:
        subs = {"@ROW_SETUP@": "const int lane = threadIdx.x & 31;\n"
                               "    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);\n"
                               "    if (row >= rows) return;",
                "@TID@": "lane", "@NT@": "32", "@RSUM@": "warp_sum", "@RMAX@": "warp_max", "@RMIN@": "warp_min",
                "@LEADER@": "lane == 0", "@LAUNCH@": f"(unsigned)({cdiv('rows', threads // 32)}), {threads}"}
    for token, value in subs.items():
        text = text.replace(token, value)
    return text


def row_prelude(dtype: DType, mode: str, flavour: str, threads: int):
    return cuda_prelude(dtype, reductions=flavour, block_threads=threads if flavour == "cub" else None, modes=MODES_ALL)


def strategy_name(mode: str, flavour: str) -> str:
    return "warp_per_row" if mode == "warp" else flavour


def _call(stem: str, args: list[str]) -> str:
    return f"return _ext_.{stem}({', '.join(args)})"


# ---------------------------------------------------------------- reductions

REDUCTIONS = {
    # name: (main-op placeholder key, init, combine(acc, v), reduce token, finish(acc, n), input kind)
    "sum": ("sum", "0.f", "acc + v", "@RSUM@", "acc", "randn"),
    "mean": ("mean", "0.f", "acc + v", "@RSUM@", "acc / (float)n", "randn"),
    "max": ("amax", "-INFINITY", "fmaxf(acc, v)", "@RMAX@", "acc", "randn"),
    "min": ("amin", "INFINITY", "fminf(acc, v)", "@RMIN@", "acc", "randn"),
    "l2_norm": ("vector_norm", "0.f", "acc + v * v", "@RSUM@", "sqrtf(acc)", "randn"),
    "sum_of_squares": ("sum", "0.f", "acc + v * v", "@RSUM@", "acc", "randn"),
    "abs_mean": ("mean", "0.f", "acc + fabsf(v)", "@RSUM@", "acc / (float)n", "randn"),
}

LASTDIM_REDUCE = """
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t rows, int64_t n) {{
    @ROW_SETUP@
    const elem_t* __restrict__ row_ptr = x + row * n;
    float acc = {init};
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(row_ptr[c]);
{pre}
        acc = {combine};
    }}
    acc = {reduce}(acc);
    if (@LEADER@) {{
        float v = {finish};
{post}
        out[row] = store_f(v);
    }}
}}
"""

# Two passes over the row: the statistic of the first (max, mean) is needed by the second.
LASTDIM_TWO_PASS = """
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t rows, int64_t n) {{
    @ROW_SETUP@
    const elem_t* __restrict__ row_ptr = x + row * n;
    float acc = {init1};
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(row_ptr[c]);
{pre}
        acc = {combine1};
    }}
    const float first = {finish1};
    float acc2 = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(row_ptr[c]);
{pre}
        acc2 += {term2};
    }}
    acc2 = @RSUM@(acc2);
    if (@LEADER@) {{
        float v = {finish2};
{post}
        out[row] = store_f(v);
    }}
}}
"""

TWO_PASS_KINDS = {
    # name: (placeholder key, extra kwargs, init1, combine1, finish1, term2, finish2)
    "logsumexp": ("logsumexp", {}, "-INFINITY", "fmaxf(acc, v)", "@RMAX@(acc)", "expf(v - first)",
                  "first + logf(acc2)"),
    "var": ("var", {}, "0.f", "acc + v", "@RSUM@(acc) / (float)n", "(v - first) * (v - first)",
            "acc2 / (float)(n - 1)"),
    "std": ("std", {}, "0.f", "acc + v", "@RSUM@(acc) / (float)n", "(v - first) * (v - first)",
            "sqrtf(acc2 / (float)(n - 1))"),
}

WELFORD_HELPERS = """
// Welford: running (count, mean, m2) per thread, merged with Chan's parallel formula.
__device__ __forceinline__ void welford_add(float& count, float& mean, float& m2, float v) {
    count += 1.f;
    const float delta = v - mean;
    mean += delta / count;
    m2 += delta * (v - mean);
}

__device__ __forceinline__ void welford_merge(float& count, float& mean, float& m2, float count_b, float mean_b,
                                              float m2_b) {
    const float total = count + count_b;
    if (total == 0.f) return;
    const float delta = mean_b - mean;
    const float w = count_b / total;
    mean += delta * w;
    m2 += m2_b + delta * delta * count * w;
    count = total;
}

__device__ __forceinline__ void welford_warp(float& count, float& mean, float& m2) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float c = __shfl_xor_sync(0xffffffff, count, o);
        const float m = __shfl_xor_sync(0xffffffff, mean, o);
        const float q = __shfl_xor_sync(0xffffffff, m2, o);
        welford_merge(count, mean, m2, c, m, q);
    }
}
"""

WELFORD_BLOCK = """
// Block-wide Welford merge: warps merge with shuffles, warp 0 merges the warp results; every thread gets them.
__device__ __forceinline__ void welford_block(float& count, float& mean, float& m2) {
    __shared__ float s_count[32], s_mean[32], s_m2[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    welford_warp(count, mean, m2);
    __syncthreads();
    if (lane == 0) { s_count[warp] = count; s_mean[warp] = mean; s_m2[warp] = m2; }
    __syncthreads();
    if (warp == 0) {
        count = lane < warps ? s_count[lane] : 0.f;
        mean = lane < warps ? s_mean[lane] : 0.f;
        m2 = lane < warps ? s_m2[lane] : 0.f;
        welford_warp(count, mean, m2);
        if (lane == 0) { s_count[0] = count; s_mean[0] = mean; s_m2[0] = m2; }
    }
    __syncthreads();
    count = s_count[0];
    mean = s_mean[0];
    m2 = s_m2[0];
}
"""

WELFORD_VAR = """
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t rows, int64_t n) {{
    @ROW_SETUP@
    const elem_t* __restrict__ row_ptr = x + row * n;
    float count = 0.f, mean = 0.f, m2 = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(row_ptr[c]);
{pre}
        welford_add(count, mean, m2, v);
    }}
    {merge}(count, mean, m2);
    if (@LEADER@) {{
        float v = {finish};
{post}
        out[row] = store_f(v);
    }}
}}
"""

PROD_WARP = """
// One warp per row: lanes multiply strided elements, then a shuffle product.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t rows, int64_t n) {{
    @ROW_SETUP@
    const elem_t* __restrict__ row_ptr = x + row * n;
    float acc = 1.f;
    for (int64_t c = @TID@; c < n; c += @NT@) acc *= load_f(row_ptr[c]);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc *= __shfl_xor_sync(0xffffffff, acc, o);
    if (@LEADER@) {{
        float v = acc;
{post}
        out[row] = store_f(v);
    }}
}}
"""

MIDDIM_REDUCE = """
// x is [outer, n, inner]; one thread per (outer, inner) output walks the reduced dim, so a warp reads
// 32 consecutive elements at every step.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t outer, int64_t n,
                              int64_t inner) {{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= outer * inner) return;
    const int64_t o = idx / inner, i = idx % inner;
    const elem_t* __restrict__ col = x + o * n * inner + i;
    float acc = {init};
    for (int64_t r = 0; r < n; ++r) {{
        float v = load_f(col[r * inner]);
{pre}
        acc = {combine};
    }}
    float v = {finish};
{post}
    out[idx] = store_f(v);
}}
"""

ARG_LASTDIM = """
__device__ __forceinline__ void arg_better(float& best, int64_t& best_i, float v, int64_t i) {{
    // first occurrence wins ties, as torch.{name} does
    if ({cmp} || (v == best && i < best_i)) {{ best = v; best_i = i; }}
}}

__global__ void {stem}_kernel(const elem_t* __restrict__ x, int64_t* __restrict__ out, int64_t rows, int64_t n) {{
    @ROW_SETUP@
    const elem_t* __restrict__ row_ptr = x + row * n;
    float best = {init};
    int64_t best_i = INT64_MAX;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(row_ptr[c]);
{pre}
        arg_better(best, best_i, v, c);
    }}
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {{
        const float ov = __shfl_xor_sync(0xffffffff, best, o);
        const int64_t oi = __shfl_xor_sync(0xffffffff, best_i, o);
        arg_better(best, best_i, ov, oi);
    }}
{block_merge}
}}
"""

ARG_BLOCK_MERGE = """    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) { sv[warp] = best; si[warp] = best_i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < warps; ++w) arg_better(best, best_i, sv[w], si[w]);
        out[row] = best_i;
    }"""

ARG_MIDDIM = """
__global__ void {stem}_kernel(const elem_t* __restrict__ x, int64_t* __restrict__ out, int64_t outer, int64_t n,
                              int64_t inner) {{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= outer * inner) return;
    const int64_t o = idx / inner, i = idx % inner;
    const elem_t* __restrict__ col = x + o * n * inner + i;
    float best = {init};
    int64_t best_i = 0;
    for (int64_t r = 0; r < n; ++r) {{
        float v = load_f(col[r * inner]);
{pre}
        if ({cmp}) {{ best = v; best_i = r; }}
    }}
    out[idx] = best_i;
}}
"""


def _reduce_host(stem: str, dtype: DType, lastdim: bool, is_index: bool, keepdim: bool, dim_index: int,
                 launch: str) -> str:
    out_opts = "x.options().dtype(at::kLong)" if is_index else "x.options()"
    out_ptr = "out.data_ptr<int64_t>()" if is_index else ptr("out", False)
    lines = [f"torch::Tensor {stem}(torch::Tensor x) {{", host_checks(stem, ["x"], dtype),
             f"    const int64_t dim = {dim_index};",
             "    const int64_t n = x.size(dim);",
             "    int64_t outer = 1, inner = 1;",
             "    for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);",
             "    for (int64_t i = dim + 1; i < x.dim(); ++i) inner *= x.size(i);",
             "    std::vector<int64_t> out_shape;",
             "    for (int64_t i = 0; i < x.dim(); ++i) {",
             "        if (i != dim) out_shape.push_back(x.size(i));",
             f"        else if ({'true' if keepdim else 'false'}) out_shape.push_back(1);",
             "    }",
             f"    auto out = torch::empty(out_shape, {out_opts});",
             "    if (out.numel() == 0) return out;"]
    if lastdim:
        lines += ["    const int64_t rows = outer;",
                  f"    {stem}_kernel<<<{launch}, 0, {STREAM}>>>({ptr('x')}, {out_ptr}, rows, n);"]
    else:
        lines.append(f"    const int blocks = (int)({cdiv('outer * inner', 256)});")
        lines.append(f"    {stem}_kernel<<<blocks, 256, 0, {STREAM}>>>({ptr('x')}, {out_ptr}, outer, n, inner);")
    lines += [LAUNCH_CHECK, "    return out;", "}"]
    return "\n".join(lines)


def reduction_pair(rng: random.Random, name: str, pre: list, post: list, dtype: DType) -> SeedPair:
    dims, consts, cols = pick_rows(rng)
    is_index = name in ("argmax", "argmin")
    lastdim = len(dims) == 2 or rng.random() < 0.5 or name in TWO_PASS_KINDS or name == "prod"
    if name == "prod":
        b, d = rng.choice([(4096, 32), (8192, 16), (2048, 64), (16384, 24)])
        dims, consts, cols = ["batch_size", "dim"], {"batch_size": b, "dim": d}, d
    if is_index:
        post = []
    dim_index = len(dims) - 1 if lastdim else 1
    keepdim = (not is_index) and rng.random() < 0.3
    keep = ", keepdim=True" if keepdim else ""
    fwd = [f"x = {spelled(op.tag, 'x')}" for op in pre]
    mode, flavour = row_mapping(rng, cols, block_only=False)
    threads = row_threads(cols) if mode == "block" else rng.choice((128, 256))
    welford = name in ("var", "std") and rng.random() < 0.5
    extra = ""
    if name in TWO_PASS_KINDS:
        key, _, init1, combine1, finish1, term2, finish2 = TWO_PASS_KINDS[name]
        fwd.append(f"x = {spelled(key, 'x', dim=-1, keep=keep)}")
        if welford:
            finish = "m2 / (count - 1.f)" if name == "var" else "sqrtf(m2 / (count - 1.f))"
            kernel = WELFORD_VAR.format(stem="{stem}", pre=chain_cuda(pre, "v", 8), post=chain_cuda(post, "v", 8),
                                        merge="welford_warp" if mode == "warp" else "welford_block", finish=finish)
            extra = WELFORD_HELPERS + ("" if mode == "warp" else WELFORD_BLOCK)
            strategy = "welford"
        else:
            kernel = LASTDIM_TWO_PASS.format(stem="{stem}", init1=init1, combine1=combine1, finish1=finish1,
                                             term2=term2, finish2=finish2, pre=chain_cuda(pre, "v", 8),
                                             post=chain_cuda(post, "v", 8))
            strategy = strategy_name(mode, flavour)
        composition_name = name
    elif name == "prod":
        mode, flavour = "warp", "warp_only"
        fwd.append(f"x = {spelled('prod', 'x', dim=-1, keep=keep)}")
        kernel = PROD_WARP.format(stem="{stem}", post=chain_cuda(post, "v", 8))
        strategy, composition_name = "warp_per_row", "prod"
    elif is_index:
        cmp = "v > best" if name == "argmax" else "v < best"
        init = "-INFINITY" if name == "argmax" else "INFINITY"
        fwd.append(f"x = {spelled(name, 'x', dim=dim_index if not lastdim else -1, keep='')}")
        if lastdim:
            merge = ARG_BLOCK_MERGE if mode == "block" else "    if (lane == 0) out[row] = best_i;"
            kernel = ARG_LASTDIM.format(stem="{stem}", init=init, pre=chain_cuda(pre, "v", 8), cmp=cmp, name=name,
                                        block_merge=merge)
            strategy = "warp_per_row" if mode == "warp" else "warp_shuffle"
            flavour = "warp_only"
        else:
            kernel = ARG_MIDDIM.format(stem="{stem}", init=init, pre=chain_cuda(pre, "v", 8), cmp=cmp)
            strategy, flavour = "thread_per_output", None
        composition_name = name
    else:
        key, init, combine, reduce, finish, _ = REDUCTIONS[name]
        operand = {"l2_norm": "x", "sum_of_squares": spelled("square", "x"), "abs_mean": spelled("abs", "x")}.get(name, "x")
        fwd.append(f"x = {spelled(key, operand, dim=dim_index if not lastdim else -1, keep=keep)}")
        template = LASTDIM_REDUCE if lastdim else MIDDIM_REDUCE
        kernel = template.format(stem="{stem}", init=init, pre=chain_cuda(pre, "v", 8), combine=combine,
                                 reduce=reduce, finish=finish, post=chain_cuda(post, "v", 8))
        strategy = strategy_name(mode, flavour) if lastdim else "thread_per_output"
        if not lastdim:
            flavour = None
        composition_name = name
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    stem = f"{name}_{'last' if lastdim else 'mid'}" + ("_fused" if pre or post else "")
    kernel = kernel.replace("{stem}", stem)
    launch = ""
    if lastdim:
        kernel = map_rows(kernel, mode, threads)
        launch = map_rows("@LAUNCH@", mode, threads)
    body = extra + kernel + "\n" + _reduce_host(stem, dtype, lastdim, is_index, keepdim, dim_index, launch)
    x_kind = "positive" if name == "prod" else "randn"
    if name == "prod":
        x_in = f"torch.rand({', '.join(dims)}{'' if dtype is FP32 else ', dtype=' + dtype.torch}) * 0.5 + 0.75"
    else:
        x_in = tensor_input(dims, dtype, x_kind)
    desc = f"{name.replace('_', ' ')} over dim {dim_index if not lastdim else -1}"
    problem = ProblemSpec(doc=desc + (f" with {chain_doc(pre + post)} fused in" if pre or post else ""),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[x_in], init_inputs=[])
    if flavour is None:
        prelude = cuda_prelude(dtype, modes=MODES_ALL)
    else:
        prelude = cuda_prelude(dtype, reductions=flavour, block_threads=threads if flavour == "cub" else None,
                               modes=MODES_ALL)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=prelude, init_params=[], init_body="",
                              forward_params=["x"], forward_body=_call(stem, ["x.contiguous()"]))
    family = "reduce_" + name if name not in ("argmax", "argmin") else name
    composition = ">".join(filter(None, [chain_signature(pre), f"{composition_name}[{'last' if lastdim else 'mid'}]",
                                         chain_signature(post)]))
    return make_pair(rng, family, ["reduction"] + chain_tags(pre) + chain_tags(post), 2 if pre or post else 1,
                     composition, dtype, problem, candidate, strategy)


CONCENTRATING = {"l2_norm", "sum_of_squares", "abs_mean", "mean", "var", "std", "logsumexp", "prod"}


def gen_reductions(rng: random.Random) -> Iterator[SeedPair]:
    names = list(REDUCTIONS) + ["argmax", "argmin", "logsumexp", "var", "std", "prod"]
    while True:
        name = rng.choice(names)
        if name in ("argmax", "argmin"):
            # exact pre-ops only, in fp32: rounding a transcendental differently would move ties and indices
            pre = random_chain(rng, rng.choice((0, 0, 1)), ["relu", "abs", "scale", "shift", "square"])
            yield reduction_pair(rng, name, pre, [], FP32)
            continue
        pre = random_chain(rng, rng.choice((0, 0, 1, 2)))
        post = random_chain(rng, rng.choice((0, 0, 1)), ["tanh", "sigmoid", "relu", "scale", "shift", "softplus"])
        if name in ("var", "std", "prod"):
            pre = []
        # over a long row these statistics are nearly the same number for any random input, within the fp16
        # tolerance: the validator's other-seed probe would call the problem degenerate
        dtype = FP32 if name in CONCENTRATING else pick_dtype(rng, 0.25)
        yield reduction_pair(rng, name, pre, post, dtype)


# ---------------------------------------------------------------- softmax family

SOFTMAX_THREE_PASS = """
// Row max, then the sum of exponentials, then the normalised write: three passes over an L2-resident row.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t rows,
                              int64_t n) {{
    @ROW_SETUP@
    const int64_t base = row * n;
    float m = -INFINITY;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        m = fmaxf(m, v);
    }}
    m = @RMAX@(m);
    float s = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        s += expf(v - m);
    }}
    s = @RSUM@(s);
{norm_const}
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        v = {out_expr};
{post}
        y[base + c] = store_f(v);
    }}
}}
"""

ONLINE_HELPERS = """
// Online softmax statistics: (m, s) is a running max and the sum of exp(v - m); merging rescales the smaller side.
__device__ __forceinline__ void online_merge(float& m, float& s, float m_b, float s_b) {
    const float m_new = fmaxf(m, m_b);
    s = (m == -INFINITY ? 0.f : s * expf(m - m_new)) + (m_b == -INFINITY ? 0.f : s_b * expf(m_b - m_new));
    m = m_new;
}

__device__ __forceinline__ void online_warp(float& m, float& s) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m_b = __shfl_xor_sync(0xffffffff, m, o);
        const float s_b = __shfl_xor_sync(0xffffffff, s, o);
        online_merge(m, s, m_b, s_b);
    }
}
"""

ONLINE_BLOCK = """
__device__ __forceinline__ void online_block(float& m, float& s) {
    __shared__ float s_m[32], s_s[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    online_warp(m, s);
    __syncthreads();
    if (lane == 0) { s_m[warp] = m; s_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? s_m[lane] : -INFINITY;
        s = lane < warps ? s_s[lane] : 0.f;
        online_warp(m, s);
        if (lane == 0) { s_m[0] = m; s_s[0] = s; }
    }
    __syncthreads();
    m = s_m[0];
    s = s_s[0];
}
"""

SOFTMAX_ONLINE = """
// One pass for the statistics (running max and rescaled sum), one for the write.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t rows,
                              int64_t n) {{
    @ROW_SETUP@
    const int64_t base = row * n;
    float m = -INFINITY, s = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        if (v > m) {{
            s = s * expf(m - v) + 1.f;
            m = v;
        }} else {{
            s += expf(v - m);
        }}
    }}
    {merge}(m, s);
{norm_const}
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        v = {out_expr};
{post}
        y[base + c] = store_f(v);
    }}
}}
"""

SOFTMAX_SMEM = """
// The row is read from global memory once into shared memory; the max, the sum and the write read it there.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t rows,
                              int64_t n) {{
    extern __shared__ float row_cache[];
    @ROW_SETUP@
    const int64_t base = row * n;
    float m = -INFINITY;
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = load_f(x[base + c]);
{pre}
        row_cache[c] = v;
        m = fmaxf(m, v);
    }}
    m = @RMAX@(m);
    float s = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) s += expf(row_cache[c] - m);
    s = @RSUM@(s);
{norm_const}
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = row_cache[c];
        v = {out_expr};
{post}
        y[base + c] = store_f(v);
    }}
}}
"""

SOFTMAX_HOST = """
torch::Tensor {stem}(torch::Tensor x{extra_args}) {{
{checks}
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.size(-1);
    const int64_t rows = x.numel() / n;
{extra_checks}
    {stem}_kernel<<<{launch}, {smem}, {stream}>>>({xp}, {extra_ptrs}{yp}, rows, n);
{launch_check}
    return y;
}}
"""

SOFTMAX_PRE = {
    # name: (forward statement before the softmax, CUDA pre statement, extra input: None | bias | mask)
    "plain": ("", "", None),
    "scaled": ("x = x * {s}", "        v = v * {sf};", None),
    "temperature": ("x = x / {t}", "        v = v / {tf};", None),
    "softmin": ("x = -x", "        v = -v;", None),
    "bias": ("x = x + self.bias", "        v = v + load_f(bias[c]);", "bias"),
    "masked": ('x = x.masked_fill(mask, float("-inf"))', "        v = mask[base + c] ? -INFINITY : v;", "mask"),
}


def softmax_pair(rng: random.Random, log: bool, pre_kind: str, post: list, dtype: DType) -> SeedPair:
    dims, consts, cols = pick_rows(rng)
    s, t = rng.choice((0.125, 0.5, 2.0, 0.0625)), rng.choice((0.7, 2.0, 1.5))
    torch_pre, cuda_pre, extra = SOFTMAX_PRE[pre_kind]
    torch_pre, cuda_pre = torch_pre.format(s=s, t=t), cuda_pre.format(sf=cf(s), tf=cf(t))
    name = "log_softmax" if log else "softmax"
    mode, flavour = row_mapping(rng, cols)
    threads = row_threads(cols) if mode == "block" else rng.choice((128, 256))
    kinds = {"three_pass": 3.0, "online_softmax": 2.0 if extra != "mask" else 0.0,
             "smem_row_cache": 1.5 if mode == "block" and cols <= 8192 and extra != "mask" else 0.0}
    kernel_kind = rng.choices(list(kinds), list(kinds.values()))[0]
    stem = f"{name}_{pre_kind}" + ("_post" if post else "")
    fwd = ([torch_pre] if torch_pre else []) + [f"x = {spelled(name, 'x', dim=-1)}"]
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    init_params, init_body, init_inputs, params = [], "", [], ["x"]
    inputs, call = [tensor_input(dims, dtype)], ["x.contiguous()"]
    extra_params = extra_args = extra_ptrs = extra_checks = ""
    if extra == "bias":
        init_params, init_inputs = [dims[-1]], [dims[-1]]
        init_body = f"self.bias = nn.Parameter(0.5 * torch.randn({dims[-1]}{'' if dtype is FP32 else ', dtype=' + dtype.torch}))"
        extra_params, extra_args, extra_ptrs = "const elem_t* __restrict__ bias, ", ", torch::Tensor bias", ptr("bias") + ", "
        extra_checks = host_checks(stem, ["bias"], dtype) + \
            f'\n    TORCH_CHECK(bias.numel() == n, "{stem}: bias must have x.size(-1) elements");'
        call.append("self.bias")
    elif extra == "mask":
        params = ["x", "mask"]
        inputs.append(f"torch.rand({', '.join(dims)}) < {rng.choice((0.1, 0.2, 0.3))}")
        extra_params, extra_args = "const bool* __restrict__ mask, ", ", torch::Tensor mask"
        extra_ptrs = "mask.data_ptr<bool>(), "
        extra_checks = f"    @@CHECKS|{stem}|mask|bool@@" + \
            f'\n    TORCH_CHECK(mask.numel() == x.numel(), "{stem}: mask must match x");'
        call.append("mask.contiguous()")
    out_expr = "v - m - log_s" if log else "expf(v - m) * inv"
    norm_const = "    const float log_s = logf(s);" if log else "    const float inv = 1.f / s;"
    helpers = ""
    if kernel_kind == "three_pass":
        template, strategy = SOFTMAX_THREE_PASS, strategy_name(mode, flavour)
    elif kernel_kind == "online_softmax":
        template, strategy = SOFTMAX_ONLINE, "online_softmax"
        helpers = ONLINE_HELPERS + ("" if mode == "warp" else ONLINE_BLOCK)
    else:
        template, strategy = SOFTMAX_SMEM, "smem_row_cache"
    kernel = template.format(stem=stem, extra_params=extra_params, pre=cuda_pre, out_expr=out_expr,
                             norm_const=norm_const, post=chain_cuda(post, "v", 8),
                             merge="online_warp" if mode == "warp" else "online_block")
    kernel = map_rows(kernel, mode, threads)
    smem = "n * sizeof(float)" if kernel_kind == "smem_row_cache" else "0"
    host = SOFTMAX_HOST.format(stem=stem, extra_args=extra_args, checks=host_checks(stem, ["x"], dtype),
                               extra_checks=extra_checks, launch=map_rows("@LAUNCH@", mode, threads), smem=smem,
                               stream=STREAM, xp=ptr("x"), extra_ptrs=extra_ptrs, yp=ptr("y", False),
                               launch_check=LAUNCH_CHECK)
    if kernel_kind == "smem_row_cache":
        host = host.replace("    auto y = torch::empty_like(x);",
                            f'    TORCH_CHECK(x.size(-1) <= 12288, "{stem}: rows longer than 12288 do not fit the '
                            f'shared-memory row cache");\n    auto y = torch::empty_like(x);')
    doc = {"plain": "", "scaled": f"scaled by {s}", "temperature": f"at temperature {t}", "softmin": "of -x (softmin)",
           "bias": "after adding a learned bias", "masked": "with masked positions set to -inf"}[pre_kind]
    problem = ProblemSpec(doc=f"{name.replace('_', '-')} over the last dim" + (f" {doc}" if doc else "") +
                          (f", then {chain_doc(post)}" if post else ""),
                          init_params=init_params, init_body=init_body, forward_params=params,
                          forward_body="\n".join(fwd), constants=consts, inputs=inputs, init_inputs=init_inputs)
    candidate = CandidateSpec(stem=stem, cuda_body=helpers + kernel + host, prelude=row_prelude(dtype, mode, flavour, threads),
                              init_params=init_params, init_body=init_body, forward_params=params,
                              forward_body=_call(stem, call))
    fused = pre_kind != "plain" or bool(post)
    family = "masked_softmax" if pre_kind == "masked" else name
    fams = [family, name] + (["softmin"] if pre_kind == "softmin" else []) + (["masked_fill"] if extra == "mask" else []) \
        + chain_tags(post)
    composition = ">".join(filter(None, [pre_kind if pre_kind != "plain" else "", name, chain_signature(post)]))
    return make_pair(rng, family, fams, 2 if fused else 1, composition, dtype, problem, candidate, strategy)


def gen_softmax(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "clamp", "square", "tanh"])
        pre = rng.choices(list(SOFTMAX_PRE), [2, 2, 1.5, 1, 1.5, 2])[0]
        # a log-softmax of a masked row holds -inf, which no error norm can compare
        yield softmax_pair(rng, pre != "masked" and rng.random() < 0.4, pre, post, pick_dtype(rng, 0.3))


# ---------------------------------------------------------------- layer norm / rms norm / L2 normalise / standardise

ROWNORM_KERNEL = """
// {doc}
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t rows,
                              int64_t n, float eps) {{
{cache_decl}    @ROW_SETUP@
    const int64_t base = row * n;
{stats}
    for (int64_t c = @TID@; c < n; c += @NT@) {{
        float v = {load2};
{write}
{post}
        y[base + c] = store_f(v);
    }}
}}
"""

MEAN_VAR_STATS = """    float s = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float v = {load}; {cache}s += v; }}
    const float mean = @RSUM@(s) / (float)n;
    float q = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float d = {load2} - mean; q += d * d; }}
    const float rstd = rsqrtf(@RSUM@(q) / (float)n + eps);"""

WELFORD_STATS = """    float count = 0.f, mean = 0.f, m2 = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) welford_add(count, mean, m2, {load});
    {merge}(count, mean, m2);
    const float rstd = rsqrtf(m2 / (float)n + eps);"""

RMS_STATS = """    float q = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float v = {load}; {cache}q += v * v; }}
    const float rstd = rsqrtf(@RSUM@(q) / (float)n + eps);"""

L2_STATS = """    float q = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float v = {load}; {cache}q += v * v; }}
    const float inv = 1.f / fmaxf(sqrtf(@RSUM@(q)), eps);"""

STANDARDIZE_STATS = """    float s = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float v = {load}; {cache}s += v; }}
    const float mean = @RSUM@(s) / (float)n;
    float q = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {{ const float d = {load2} - mean; q += d * d; }}
    const float inv = 1.f / (sqrtf(@RSUM@(q) / (float)(n - 1)) + eps);"""

ROWNORMS = {
    # kind: (stats template, write statement, forward lines, params (name, init expr), doc)
    "layer_norm": (MEAN_VAR_STATS, "        v = (v - mean) * rstd * load_f(weight[c]) + load_f(bias[c]);",
                   ["x = F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)"],
                   [("weight", "1.0 + 0.1 * torch.randn({d}{dt})"), ("bias", "0.1 * torch.randn({d}{dt})")],
                   "Mean and biased variance, then the affine write."),
    "rms_norm": (RMS_STATS, "        v = v * rstd * load_f(weight[c]);",
                 ["x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight"],
                 [("weight", "1.0 + 0.1 * torch.randn({d}{dt})")], "Root-mean-square statistics, then scale."),
    "l2_normalize": (L2_STATS, "        v = v * inv;", ["x = F.normalize(x, p=2.0, dim=-1, eps=self.eps)"], [],
                     "x / max(||x||_2, eps)."),
    "standardize": (STANDARDIZE_STATS, "        v = (v - mean) * inv;",
                    ["x = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + self.eps)"], [],
                    "z-score with the unbiased standard deviation."),
}
RMS_FORMS = ["x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight",
             "x = self.weight * (x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps))",
             "x = x * (x.square().mean(dim=-1, keepdim=True) + self.eps).rsqrt() * self.weight"]
LAYER_NORM_FORMS = ["x = F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)",
                    "x = F.layer_norm(x, self.weight.shape, self.weight, self.bias, eps=self.eps)"]


def rownorm_pair(rng: random.Random, kind: str, residual: bool, post: list, dtype: DType) -> SeedPair:
    dims, consts, cols = pick_rows(rng)
    stats, write, torch_lines, params, doc = ROWNORMS[kind]
    if kind == "rms_norm":
        torch_lines = [rng.choice(RMS_FORMS)]
    elif kind == "layer_norm":
        torch_lines = [rng.choice(LAYER_NORM_FORMS)]
    eps = {"l2_normalize": 1e-12, "standardize": 1e-6}.get(kind, rng.choice((1e-5, 1e-6)))
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    last = dims[-1]
    mode, flavour = row_mapping(rng, cols)
    threads = row_threads(cols) if mode == "block" else rng.choice((128, 256))
    use_welford = kind == "layer_norm" and rng.random() < 0.4
    use_cache = mode == "block" and cols <= 8192 and not use_welford and rng.random() < 0.35
    load = "(load_f(x[base + c]) + load_f(res[base + c]))" if residual else "load_f(x[base + c])"
    load2 = "row_cache[c]" if use_cache else load
    init_lines = [f"self.{p} = nn.Parameter({expr.format(d='dim', dt=dt)})" for p, expr in params] + ["self.eps = eps"]
    fwd = (["x = x + residual"] if residual else []) + torch_lines
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    stem = kind + ("_residual" if residual else "") + ("_post" if post else "")
    tensors = (["res"] if residual else []) + [p for p, _ in params]
    extra_checks = host_checks(stem, tensors, dtype) if tensors else ""
    for p, _ in params:
        extra_checks += f'\n    TORCH_CHECK({p}.numel() == n, "{stem}: {p} must have x.size(-1) elements");'
    if residual:
        extra_checks += f'\n    TORCH_CHECK(res.numel() == x.numel(), "{stem}: residual must match x");'
    helpers = ""
    if use_welford:
        stats_code = WELFORD_STATS.format(load=load, merge="welford_warp" if mode == "warp" else "welford_block")
        helpers = WELFORD_HELPERS + ("" if mode == "warp" else WELFORD_BLOCK)
        strategy = "welford"
    else:
        stats_code = stats.format(load=load, load2=load2, cache="row_cache[c] = v; " if use_cache else "")
        strategy = "smem_row_cache" if use_cache else strategy_name(mode, flavour)
    kernel = ROWNORM_KERNEL.format(doc=doc, stem=stem, extra_params="".join(f"const elem_t* __restrict__ {t}, " for t in tensors),
                                   cache_decl="    extern __shared__ float row_cache[];\n" if use_cache else "",
                                   stats=stats_code, load2=load2, write=write, post=chain_cuda(post, "v", 8))
    kernel = map_rows(kernel, mode, threads)
    host = "\n".join([
        f"torch::Tensor {stem}(torch::Tensor x{''.join(', torch::Tensor ' + t for t in tensors)}, double eps) {{",
        host_checks(stem, ["x"], dtype), "    auto y = torch::empty_like(x);", "    if (y.numel() == 0) return y;",
        "    const int64_t n = x.size(-1);", "    const int64_t rows = x.numel() / n;", extra_checks,
        f'    TORCH_CHECK(n <= 12288, "{stem}: the row cache holds at most 12288 values");' if use_cache else "",
        f"    {stem}_kernel<<<{map_rows('@LAUNCH@', mode, threads)}, {'n * sizeof(float)' if use_cache else '0'}, {STREAM}>>>("
        f"{ptr('x')}, {''.join(ptr(t) + ', ' for t in tensors)}{ptr('y', False)}, rows, n, (float)eps);",
        LAUNCH_CHECK, "    return y;", "}"])
    call_args = ["x.contiguous()"] + (["residual.contiguous()"] if residual else []) + [f"self.{p}" for p, _ in params]
    fwd_params = ["x"] + (["residual"] if residual else [])
    inputs = [tensor_input(dims, dtype)] * (2 if residual else 1)
    problem = ProblemSpec(doc=kind.replace("_", " ") + (" of x + residual" if residual else "") + " over the last dim" +
                          (f", then {chain_doc(post)}" if post else ""),
                          init_params=["dim", "eps"], init_body="\n".join(init_lines), forward_params=fwd_params,
                          forward_body="\n".join(fwd), constants=consts, inputs=inputs, init_inputs=[last, repr(eps)])
    candidate = CandidateSpec(stem=stem, cuda_body=helpers + kernel + "\n" + host,
                              prelude=row_prelude(dtype, mode, flavour, threads), init_params=["dim", "eps"],
                              init_body="\n".join(init_lines), forward_params=fwd_params,
                              forward_body=_call(stem, call_args + ["self.eps"]))
    fams = [kind] + (["residual_add"] if residual else []) + chain_tags(post)
    composition = ">".join(filter(None, ["residual_add" if residual else "", kind, chain_signature(post)]))
    return make_pair(rng, kind, fams, 2 if residual or post else 1, composition, dtype, problem, candidate, strategy)


def gen_rownorms(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        kind = rng.choices(list(ROWNORMS), [3, 3, 2, 1.5])[0]
        post = random_chain(rng, rng.choice((0, 0, 1, 2)))
        yield rownorm_pair(rng, kind, rng.random() < 0.35, post, pick_dtype(rng, 0.35))


# ---------------------------------------------------------------- channel norms on [N, C, H, W]

NCHW_SHAPES = [(16, 64, 32, 32), (8, 32, 64, 64), (32, 128, 16, 16), (4, 256, 28, 28), (64, 16, 24, 24),
               (2, 64, 112, 112), (8, 96, 30, 30), (16, 48, 40, 40)]

BATCHNORM_KERNEL = """
// Inference batch norm in one pass: per-channel scale/shift from the running stats, fused epilogue.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ mean,
                              const elem_t* __restrict__ var, const elem_t* __restrict__ weight,
                              const elem_t* __restrict__ bias, elem_t* __restrict__ y, int64_t total, int64_t C,
                              int64_t HW, float eps) {{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {{
        const int64_t c = (i / HW) % C;
        float v = (load_f(x[i]) - load_f(mean[c])) / sqrtf(load_f(var[c]) + eps) * load_f(weight[c]) + load_f(bias[c]);
{post}
        y[i] = store_f(v);
    }}
}}
"""

BATCHNORM_PLANE_KERNEL = """
// One block per (sample, channel) plane: the channel's scale and shift are computed once, then the plane is
// streamed with coalesced accesses.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ mean,
                              const elem_t* __restrict__ var, const elem_t* __restrict__ weight,
                              const elem_t* __restrict__ bias, elem_t* __restrict__ y, int64_t total, int64_t C,
                              int64_t HW, float eps) {{
    const int64_t plane = blockIdx.x;
    const int64_t c = plane % C;
    const float scale = load_f(weight[c]) / sqrtf(load_f(var[c]) + eps);
    const float shift = load_f(bias[c]) - load_f(mean[c]) * scale;
    const elem_t* __restrict__ src = x + plane * HW;
    elem_t* __restrict__ dst = y + plane * HW;
    for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) {{
        float v = load_f(src[i]) * scale + shift;
{post}
        dst[i] = store_f(v);
    }}
}}
"""

BATCHNORM_HOST = """
torch::Tensor {stem}(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight,
                     torch::Tensor bias, double eps) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: x must be [N, C, H, W]");
    const int64_t C = x.size(1), HW = x.size(2) * x.size(3), total = x.numel();
    TORCH_CHECK(mean.numel() == C && var.numel() == C && weight.numel() == C && bias.numel() == C,
                "{stem}: per-channel tensors must have C elements");
    auto y = torch::empty_like(x);
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, {threads}, 0, {stream}>>>({xp}, {mp}, {vp}, {wp}, {bp}, {yp}, total, C, HW, (float)eps);
{launch_check}
    return y;
}}
"""


def nchw_inputs(rng: random.Random, dtype: DType) -> tuple[list[str], dict[str, int], str]:
    n, c, h, w = rng.choice(NCHW_SHAPES)
    consts = {"batch_size": n, "channels": c, "height": h, "width": w}
    return ["batch_size", "channels", "height", "width"], consts, tensor_input(["batch_size", "channels", "height", "width"], dtype)


def batchnorm_pair(rng: random.Random, post: list, dtype: DType) -> SeedPair:
    _, consts, x_in = nchw_inputs(rng, dtype)
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    eps = rng.choice((1e-5, 1e-3))
    stem = "batch_norm_infer" + ("_fused" if post else "")
    layer = rng.random() < 0.4
    if layer:  # an nn.BatchNorm2d whose statistics look trained (the defaults would make it the identity)
        init = ["self.bn = nn.BatchNorm2d(channels, eps=eps)",
                "with torch.no_grad():",
                "    self.bn.weight.copy_(1.0 + 0.1 * torch.randn(channels))",
                "    self.bn.bias.copy_(0.1 * torch.randn(channels))",
                "    self.bn.running_mean.copy_(0.1 * torch.randn(channels))",
                "    self.bn.running_var.copy_(0.5 + torch.rand(channels))"]
        if dtype is not FP32:
            init.append(f"self.bn.to({dtype.torch})")
        fwd = ["x = self.bn(x)"]
        refs = ["self.bn.running_mean", "self.bn.running_var", "self.bn.weight", "self.bn.bias", "self.bn.eps"]
    else:
        init = [f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels{dt}))",
                f"self.bias = nn.Parameter(0.1 * torch.randn(channels{dt}))",
                f'self.register_buffer("running_mean", 0.1 * torch.randn(channels{dt}))',
                f'self.register_buffer("running_var", 0.5 + torch.rand(channels{dt}))',
                "self.eps = eps"]
        fwd = ["x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps)"]
        refs = ["self.running_mean", "self.running_var", "self.weight", "self.bias", "self.eps"]
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    plane = rng.random() < 0.45
    template = BATCHNORM_PLANE_KERNEL if plane else BATCHNORM_KERNEL
    threads = rng.choice((256, 512)) if plane else 256
    body = template.format(stem=stem, post=chain_cuda(post, "v", 8)) + BATCHNORM_HOST.format(
        stem=stem, checks=host_checks(stem, ["x", "mean", "var", "weight", "bias"], dtype),
        grid="(unsigned)(total / HW)" if plane else grid_1d("total"), threads=threads, stream=STREAM, xp=ptr("x"),
        mp=ptr("mean"), vp=ptr("var"), wp=ptr("weight"), bp=ptr("bias"), yp=ptr("y", False),
        launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="batch norm in inference mode (running statistics)" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=["channels", "eps"],
                          init_body="\n".join(init), forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[x_in], init_inputs=["channels", repr(eps)])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALL),
                              init_params=["channels", "eps"], init_body="\n".join(init), forward_params=["x"],
                              forward_body=_call(stem, ["x.contiguous()"] + refs))
    return make_pair(rng, "batch_norm", ["batch_norm"] + chain_tags(post), 2 if post else 1,
                     ">".join(filter(None, ["batch_norm", chain_signature(post)])), dtype, problem, candidate,
                     "thread_per_output" if plane else "grid_stride")


GROUPNORM_KERNEL = """
// One block per (sample, group): the group's channels are one contiguous chunk of (C / G) * H * W values.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t C,
                              int64_t HW, int64_t groups, float eps) {{
    const int64_t cpg = C / groups, count = cpg * HW;
    const int64_t base = (int64_t)blockIdx.x * count;
{stats}
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {{
        float v = (load_f(x[base + i]) - mean) * rstd;
{affine}
{post}
        y[base + i] = store_f(v);
    }}
}}
"""

GROUP_TWO_PASS = """    float s = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += load_f(x[base + i]);
    const float mean = block_sum(s) / (float)count;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) { const float d = load_f(x[base + i]) - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q) / (float)count + eps);"""

GROUP_WELFORD = """    float n_seen = 0.f, mean = 0.f, m2 = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) welford_add(n_seen, mean, m2, load_f(x[base + i]));
    welford_block(n_seen, mean, m2);
    const float rstd = rsqrtf(m2 / (float)count + eps);"""

GROUPNORM_HOST = """
torch::Tensor {stem}(torch::Tensor x{extra_args}, int64_t groups, double eps) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: x must be [N, C, H, W]");
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(C % groups == 0, "{stem}: channels must divide into groups");
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    {stem}_kernel<<<(unsigned)(N * groups), {threads}, 0, {stream}>>>({xp}, {extra_ptrs}{yp}, C, HW, groups, (float)eps);
{launch_check}
    return y;
}}
"""


def groupnorm_pair(rng: random.Random, instance: bool, post: list, dtype: DType) -> SeedPair:
    _, consts, x_in = nchw_inputs(rng, dtype)
    c = consts["channels"]
    groups = c if instance else rng.choice([g for g in (2, 4, 8, 16, 32) if c % g == 0])
    eps = 1e-5
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    kind = "instance_norm" if instance else "group_norm"
    stem = kind + ("_fused" if post else "")
    if instance:
        init_params, init_inputs = ["eps"], [repr(eps)]
        init, tensors, affine = "self.eps = eps", [], ""
        fwd = [rng.choice(["x = F.instance_norm(x, eps=self.eps)",
                           "x = (x - x.mean(dim=(2, 3), keepdim=True)) / torch.sqrt(x.var(dim=(2, 3), keepdim=True, "
                           "unbiased=False) + self.eps)"])]
        call = ["x.contiguous()", "x.shape[1]", "self.eps"]
    else:
        init_params, init_inputs = ["channels", "groups", "eps"], ["channels", str(groups), repr(eps)]
        init = "\n".join([f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels{dt}))",
                          f"self.bias = nn.Parameter(0.1 * torch.randn(channels{dt}))",
                          "self.groups = groups", "self.eps = eps"])
        fwd = ["x = F.group_norm(x, self.groups, self.weight, self.bias, self.eps)"]
        tensors = ["weight", "bias"]
        affine = ("        const int64_t c = ((int64_t)blockIdx.x % groups) * cpg + i / HW;\n"
                  "        v = v * load_f(weight[c]) + load_f(bias[c]);")
        call = ["x.contiguous()", "self.weight", "self.bias", "self.groups", "self.eps"]
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    welford = rng.random() < 0.4
    threads = rng.choice((256, 512, 1024))
    flavour = "warp_shuffle" if welford else rng.choices(["warp_shuffle", "smem_tree", "cub"], [3, 2, 2])[0]
    stats = GROUP_WELFORD if welford else GROUP_TWO_PASS
    helpers = WELFORD_HELPERS + WELFORD_BLOCK if welford else ""
    body = helpers + GROUPNORM_KERNEL.format(
        stem=stem, extra_params="".join(f"const elem_t* __restrict__ {t}, " for t in tensors), stats=stats,
        affine=affine, post=chain_cuda(post, "v", 8)) + GROUPNORM_HOST.format(
        stem=stem, extra_args="".join(f", torch::Tensor {t}" for t in tensors),
        checks=host_checks(stem, ["x"] + tensors, dtype), threads=threads, stream=STREAM, xp=ptr("x"),
        extra_ptrs="".join(ptr(t) + ", " for t in tensors), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{kind.replace('_', ' ')} over [N, C, H, W]" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=init_params, init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[x_in], init_inputs=init_inputs)
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=cuda_prelude(dtype, reductions=flavour,
                                                   block_threads=threads if flavour == "cub" else None, modes=MODES_ALL),
                              init_params=init_params, init_body=init, forward_params=["x"],
                              forward_body=_call(stem, call))
    return make_pair(rng, kind, [kind] + chain_tags(post), 2 if post else 1,
                     ">".join(filter(None, [kind, chain_signature(post)])), dtype, problem, candidate,
                     "welford" if welford else flavour)


def gen_channel_norms(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        post = random_chain(rng, rng.choice((0, 1, 1, 2)))
        r = rng.random()
        dtype = pick_dtype(rng, 0.25)
        if r < 0.4:
            yield batchnorm_pair(rng, post, dtype)
        else:
            yield groupnorm_pair(rng, r > 0.75, post, dtype)


# ---------------------------------------------------------------- cosine similarity / pairwise distance

COSINE_KERNEL = """
__global__ void {stem}_kernel(const elem_t* __restrict__ a, const elem_t* __restrict__ b, elem_t* __restrict__ out,
                              int64_t rows, int64_t n, float eps) {{
    @ROW_SETUP@
    const int64_t base = row * n;
{accumulate}
    if (@LEADER@) {{
        float v = {finish};
{post}
        out[row] = store_f(v);
    }}
}}
"""

COSINE_ACCUMULATE = """    float dot = 0.f, na = 0.f, nb = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {
        const float u = load_f(a[base + c]), w = load_f(b[base + c]);
        dot += u * w; na += u * u; nb += w * w;
    }
    dot = @RSUM@(dot);
    na = @RSUM@(na);
    nb = @RSUM@(nb);"""

DISTANCE_ACCUMULATE = """    float acc = 0.f;
    for (int64_t c = @TID@; c < n; c += @NT@) {
        const float d = load_f(a[base + c]) - load_f(b[base + c]) + eps;
        acc += {term};
    }
    acc = @RSUM@(acc);"""

ROWPAIR_HOST = """
torch::Tensor {stem}(torch::Tensor a, torch::Tensor b) {{
{checks}
    TORCH_CHECK(a.sizes() == b.sizes(), "{stem}: a and b must have the same shape");
    const int64_t n = a.size(-1), rows = a.numel() / n;
    auto out = torch::empty(a.sizes().slice(0, a.dim() - 1), a.options());
    if (rows == 0) return out;
    {stem}_kernel<<<{launch}, 0, {stream}>>>({ap}, {bp}, {op}, rows, n, {eps});
{launch_check}
    return out;
}}
"""


def rowpair_pair(rng: random.Random, kind: str, dtype: DType) -> SeedPair:
    dims, consts, cols = pick_rows(rng)
    post = random_chain(rng, rng.choice((0, 1)), ["scale", "shift", "relu", "square", "abs"])
    mode, flavour = row_mapping(rng, cols)
    threads = row_threads(cols) if mode == "block" else rng.choice((128, 256))
    if kind == "cosine_similarity":
        stem, eps = "cosine_similarity" + ("_post" if post else ""), "1e-8f"
        main = "x = " + rng.choice(["F.cosine_similarity(a, b, dim=-1)",
                                    "F.cosine_similarity(a, b, dim=-1, eps=1e-8)"])
        accumulate, finish = COSINE_ACCUMULATE, "dot / (fmaxf(sqrtf(na), eps) * fmaxf(sqrtf(nb), eps))"
        doc, fams = "cosine similarity of matching rows", ["cosine_similarity", "vector_normalize"]
    else:
        p = rng.choice((1, 2))
        stem, eps = f"pairwise_distance_p{p}" + ("_post" if post else ""), "1e-6f"
        main = f"x = F.pairwise_distance(a, b, p={float(p)})"
        accumulate = DISTANCE_ACCUMULATE.replace("{term}", "d * d" if p == 2 else "fabsf(d)")
        finish = "sqrtf(acc)" if p == 2 else "acc"
        doc, fams = f"L{p} distance between matching rows", ["pairwise_distance", "reduction"]
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    kernel = map_rows(COSINE_KERNEL.format(stem=stem, accumulate=accumulate, finish=finish,
                                           post=chain_cuda(post, "v", 8)), mode, threads)
    body = kernel + ROWPAIR_HOST.format(stem=stem, checks=host_checks(stem, ["a", "b"], dtype),
                                        launch=map_rows("@LAUNCH@", mode, threads), stream=STREAM, ap=ptr("a"),
                                        bp=ptr("b"), op=ptr("out", False), eps=eps, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=doc + (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["a", "b"], forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(dims, dtype)] * 2, init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=row_prelude(dtype, mode, flavour, threads),
                              init_params=[], init_body="", forward_params=["a", "b"],
                              forward_body=_call(stem, ["a.contiguous()", "b.contiguous()"]))
    return make_pair(rng, kind, fams + chain_tags(post), 2 if post else 1,
                     ">".join(filter(None, [stem.split("_post")[0], chain_signature(post)])), dtype, problem, candidate,
                     strategy_name(mode, flavour))


def gen_cosine(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        kind = rng.choice(("cosine_similarity", "pairwise_distance"))
        yield rowpair_pair(rng, kind, pick_dtype(rng, 0.2) if kind == "cosine_similarity" else FP32)


# ---------------------------------------------------------------- scans

SCAN_KERNEL = """
__device__ __forceinline__ float scan_op(float a, float b) {{ return {op}; }}

// One block per row; the row is staged in shared memory, each thread scans a contiguous chunk, the chunk totals
// are scanned across the block with warp shuffles, and each chunk is offset by its exclusive prefix.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int64_t n) {{
    extern __shared__ float row[];
    __shared__ float warp_tot[32];
    const int64_t base = (int64_t)blockIdx.x * n;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(x[base + {src_index}]);
{pre}
        row[c] = v;
    }}
    __syncthreads();
    const int64_t per = (n + blockDim.x - 1) / blockDim.x;
    const int64_t start = threadIdx.x * per, stop = min(start + per, n);
    float acc = {identity};
    for (int64_t c = start; c < stop; ++c) {{ acc = scan_op(acc, row[c]); row[c] = acc; }}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    float incl = acc;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {{
        const float t = __shfl_up_sync(0xffffffff, incl, o);
        if (lane >= o) incl = scan_op(t, incl);
    }}
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    if (warp == 0) {{
        float w = lane < warps ? warp_tot[lane] : {identity};
        #pragma unroll
        for (int o = 1; o < 32; o <<= 1) {{
            const float t = __shfl_up_sync(0xffffffff, w, o);
            if (lane >= o) w = scan_op(t, w);
        }}
        if (lane < warps) warp_tot[lane] = w;
    }}
    __syncthreads();
    float excl = __shfl_up_sync(0xffffffff, incl, 1);
    if (lane == 0) excl = {identity};
    if (warp > 0) excl = scan_op(warp_tot[warp - 1], excl);
    for (int64_t c = start; c < stop; ++c) row[c] = scan_op(excl, row[c]);
    __syncthreads();
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = row[c];
{post}
        y[base + {src_index}] = store_f(v);
    }}
}}
"""

SCAN_HOST = """
torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.size(-1), rows = x.numel() / n;
    TORCH_CHECK(n <= 12288, "{stem}: rows longer than 12288 do not fit the shared-memory scan");
    {stem}_kernel<<<(unsigned)rows, 256, n * sizeof(float), {stream}>>>({xp}, {yp}, n);
{launch_check}
    return y;
}}
"""

CUB_SCAN_KERNEL = """
struct ScanOp {{
    __device__ __forceinline__ float operator()(float a, float b) const {{ return {op}; }}
}};
using BlockScanF = cub::BlockScan<float, {threads}>;

// One block per row, scanned in tiles of {threads} elements with cub::BlockScan; a running carry joins the tiles.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int64_t n) {{
    __shared__ typename BlockScanF::TempStorage storage;
    const int64_t base = (int64_t)blockIdx.x * n;
    float carry = {identity};
    for (int64_t tile = 0; tile < n; tile += {threads}) {{
        const int64_t c = tile + threadIdx.x;
        float v = {identity};
        if (c < n) {{
            v = load_f(x[base + {src_index}]);
{pre}
        }}
        float total;
        BlockScanF(storage).InclusiveScan(v, v, ScanOp(), total);
        __syncthreads();
        v = ScanOp()(carry, v);
        carry = ScanOp()(carry, total);
        if (c < n) {{
{post}
            y[base + {src_index}] = store_f(v);
        }}
    }}
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.size(-1), rows = x.numel() / n;
    {stem}_kernel<<<(unsigned)rows, {threads}, 0, {stream}>>>({xp}, {yp}, n);
{launch_check}
    return y;
}}
"""

SCAN_SHAPES = [(4096, 256), (2048, 512), (1024, 1024), (512, 2048), (8192, 128), (256, 4096), (3000, 300)]
CUMPROD_SHAPES = [(4096, 32), (8192, 16), (2048, 64), (1024, 48)]
SCANS = {
    # kind: (forward statement, op, identity, source index)
    "cumsum": (spelled("cumsum", "x", dim=-1), "a + b", "0.f", "c"),
    "cumprod": (spelled("cumprod", "x", dim=-1), "a * b", "1.f", "c"),
    "reverse_cumsum": ("torch.flip(" + spelled("cumsum", "torch.flip(x, dims=[-1])", dim=-1) + ", dims=[-1])",
                       "a + b", "0.f", "(n - 1 - c)"),
    "cummax": ("torch.cummax(x, dim=-1).values", "fmaxf(a, b)", "-INFINITY", "c"),
    "cummin": ("torch.cummin(x, dim=-1).values", "fminf(a, b)", "INFINITY", "c"),
    "logcumsumexp": ("torch.logcumsumexp(x, dim=-1)",
                     "a == -INFINITY ? b : (b == -INFINITY ? a : fmaxf(a, b) + log1pf(expf(-fabsf(a - b))))",
                     "-INFINITY", "c"),
}


def scan_pair(rng: random.Random, kind: str, pre: list, post: list, dtype: DType) -> SeedPair:
    b, d = rng.choice(CUMPROD_SHAPES if kind == "cumprod" else SCAN_SHAPES)
    consts = {"batch_size": b, "dim": d}
    main, op, identity, src = SCANS[kind]
    fwd = [f"x = {spelled(o.tag, 'x')}" for o in pre] + [f"x = {main}"]
    fwd += [f"x = {spelled(o.tag, 'x')}" for o in post] + ["return x"]
    stem = kind + ("_fused" if pre or post else "")
    use_cub = rng.random() < 0.35
    checks = host_checks(stem, ["x"], dtype)
    if use_cub:
        threads = rng.choice((128, 256))
        body = CUB_SCAN_KERNEL.format(op=op, threads=threads, stem=stem, identity=identity, src_index=src,
                                      pre=chain_cuda(pre, "v", 12), post=chain_cuda(post, "v", 12), checks=checks,
                                      stream=STREAM, xp=ptr("x"), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
        prelude = cuda_prelude(dtype, modes=MODES_ALL, headers=("<cub/block/block_scan.cuh>",))
    else:
        body = SCAN_KERNEL.format(op=op, stem=stem, src_index=src, pre=chain_cuda(pre, "v", 8), identity=identity,
                                  post=chain_cuda(post, "v", 8)) + SCAN_HOST.format(
            stem=stem, checks=checks, stream=STREAM, xp=ptr("x"), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
        prelude = cuda_prelude(dtype, modes=MODES_ALL)
    x_kind = "positive" if kind == "cumprod" else "randn"
    problem = ProblemSpec(doc=f"{kind.replace('_', ' ')} along the last dim" +
                          (f" with {chain_doc(pre + post)} fused in" if pre or post else ""),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(["batch_size", "dim"], dtype, x_kind)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=prelude, init_params=[], init_body="",
                              forward_params=["x"], forward_body=_call(stem, ["x.contiguous()"]))
    fused = bool(pre or post)
    return make_pair(rng, kind, ["scan"] + chain_tags(pre) + chain_tags(post), 2 if fused else 1,
                     ">".join(filter(None, [chain_signature(pre), kind, chain_signature(post)])), dtype, problem,
                     candidate, "cub_scan" if use_cub else "block_scan")


def gen_scans(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        kind = rng.choice(("cumsum", "cumsum", "cumprod", "reverse_cumsum", "cummax", "cummin", "logcumsumexp"))
        pool = ["relu", "abs", "sigmoid", "scale", "square", "tanh"]
        pre = random_chain(rng, rng.choice((0, 1)), pool if kind != "cumprod" else ["sigmoid", "hardsigmoid"])
        post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "tanh", "relu"])
        yield scan_pair(rng, kind, pre, post, FP32 if rng.random() < 0.85 else pick_dtype(rng, 1.0))


GENERATORS = {
    "reduction": (gen_reductions, 1000),
    "softmax": (gen_softmax, 600),
    "row_norm": (gen_rownorms, 700),
    "channel_norm": (gen_channel_norms, 450),
    "cosine_similarity": (gen_cosine, 150),
    "scan": (gen_scans, 280),
}
