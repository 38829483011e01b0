"""Row-wise families: reductions (last and middle dim), softmax / log-softmax variants, layer/RMS/group/batch/
instance norms, L2 normalisation, cosine similarity and scans. Last-dim kernels use one block per row with
warp-shuffle block reductions; middle-dim reductions use one thread per output column for coalesced reads."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .elementwise import pick_dtype
from .ops import chain_cuda, chain_signature, chain_tags, chain_torch, random_chain
from .render import (FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cuda_prelude,
                     grid_1d, host_checks, make_pair, ptr, tensor_input)

ROW_SHAPES = [(4096, 512), (2048, 1024), (1024, 2048), (512, 4096), (256, 8192), (8192, 256), (16384, 128),
              (4000, 1000), (333, 3000), (128, 16384)]
MID_SHAPES = [(64, 256, 512), (32, 512, 256), (16, 1024, 1024), (128, 64, 2048), (8, 4096, 256), (50, 300, 700)]


def row_threads(cols: int) -> int:
    """Enough threads to cover a row in one or two strides, as a multiple of the warp size."""
    t = 32
    while t < cols and t < 512:
        t *= 2
    return t


def pick_rows(rng: random.Random) -> tuple[list[str], dict[str, int], int]:
    if rng.random() < 0.65:
        b, d = rng.choice(ROW_SHAPES)
        return ["batch_size", "dim"], {"batch_size": b, "dim": d}, d
    b, s, d = rng.choice(MID_SHAPES)
    return ["batch_size", "seq_len", "dim"], {"batch_size": b, "seq_len": s, "dim": d}, d


# ---------------------------------------------------------------- reductions

REDUCTIONS = {
    # name: (torch call over `x`, init, combine(acc, v), block reduce, finish(acc, n), output is index)
    "sum": ("torch.sum({x}, dim={d}{k})", "0.f", "acc + v", "block_sum", "acc", False),
    "mean": ("torch.mean({x}, dim={d}{k})", "0.f", "acc + v", "block_sum", "acc / (float)n", False),
    "max": ("torch.amax({x}, dim={d}{k})", "-INFINITY", "fmaxf(acc, v)", "block_max", "acc", False),
    "min": ("torch.amin({x}, dim={d}{k})", "INFINITY", "fminf(acc, v)", "block_min", "acc", False),
    "l2_norm": ("torch.linalg.vector_norm({x}, dim={d}{k})", "0.f", "acc + v * v", "block_sum", "sqrtf(acc)",
                False),
    "sum_of_squares": ("torch.sum({x} * {x}, dim={d}{k})", "0.f", "acc + v * v", "block_sum", "acc", False),
    "abs_mean": ("torch.mean(torch.abs({x}), dim={d}{k})", "0.f", "acc + fabsf(v)", "block_sum",
                 "acc / (float)n", False),
    "argmax": ("torch.argmax({x}, dim={d}{k})", "", "", "", "", True),
    "argmin": ("torch.argmin({x}, dim={d}{k})", "", "", "", "", True),
}

LASTDIM_REDUCE = """
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t n) {{
    const elem_t* __restrict__ row = x + (int64_t)blockIdx.x * n;
    float acc = {init};
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(row[c]);
{pre}
        acc = {combine};
    }}
    acc = {block_reduce}(acc);
    if (threadIdx.x == 0) {{
        float v = {finish};
{post}
        out[blockIdx.x] = store_f(v);
    }}
}}
"""

MIDDIM_REDUCE = """
// x is [outer, n, inner]; one thread per (outer, inner) output walks the reduced dim, so a warp reads
// 32 consecutive floats at every step.
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

__global__ void {stem}_kernel(const elem_t* __restrict__ x, int64_t* __restrict__ out, int64_t n) {{
    const elem_t* __restrict__ row = x + (int64_t)blockIdx.x * n;
    float best = {init};
    int64_t best_i = INT64_MAX;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(row[c]);
{pre}
        arg_better(best, best_i, v, c);
    }}
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {{
        const float ov = __shfl_xor_sync(0xffffffff, best, o);
        const int64_t oi = __shfl_xor_sync(0xffffffff, best_i, o);
        arg_better(best, best_i, ov, oi);
    }}
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) {{ sv[warp] = best; si[warp] = best_i; }}
    __syncthreads();
    if (threadIdx.x == 0) {{
        for (int w = 1; w < warps; ++w) arg_better(best, best_i, sv[w], si[w]);
        out[blockIdx.x] = best_i;
    }}
}}
"""

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
                 threads: int) -> str:
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
             f"        if (i != dim) out_shape.push_back(x.size(i));",
             f"        else if ({'true' if keepdim else 'false'}) out_shape.push_back(1);",
             "    }",
             f"    auto out = torch::empty(out_shape, {out_opts});",
             "    if (out.numel() == 0) return out;"]
    if lastdim:
        lines.append(f"    {stem}_kernel<<<(unsigned)(outer * inner), {threads}, 0, {STREAM}>>>({ptr('x')}, {out_ptr}, n);")
    else:
        lines.append(f"    const int blocks = (int)((outer * inner + 255) / 256);")
        lines.append(f"    {stem}_kernel<<<blocks, 256, 0, {STREAM}>>>({ptr('x')}, {out_ptr}, outer, n, inner);")
    lines += [LAUNCH_CHECK, "    return out;", "}"]
    return "\n".join(lines)


def reduction_pair(rng: random.Random, name: str, pre: list, post: list, dtype: DType) -> SeedPair:
    dims, consts, _ = pick_rows(rng)
    torch_call, init, combine, block_reduce, finish, is_index = REDUCTIONS[name]
    if is_index:
        post = []
    lastdim = len(dims) == 2 or rng.random() < 0.5
    dim_index = len(dims) - 1 if lastdim else 1
    keepdim = (not is_index) and rng.random() < 0.3
    k = ", keepdim=True" if keepdim else ""
    fused = bool(pre or post)
    stem = f"{name}_{'last' if lastdim else 'mid'}" + ("_fused" if fused else "")
    fwd = []
    if pre:
        fwd.append(chain_torch(pre, "x"))
    fwd.append("x = " + torch_call.format(x="x", d=dim_index if not lastdim else -1, k=k))
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    threads = row_threads(consts["dim"]) if lastdim else 256
    if lastdim:
        threads = max(threads, 64)
    if is_index:
        cmp = "v > best" if name == "argmax" else "v < best"
        init = "-INFINITY" if name == "argmax" else "INFINITY"
        template = ARG_LASTDIM if lastdim else ARG_MIDDIM
        kernel = template.format(stem=stem, init=init, pre=chain_cuda(pre, "v", 8), cmp=cmp, name=name)
    else:
        template = LASTDIM_REDUCE if lastdim else MIDDIM_REDUCE
        kernel = template.format(stem=stem, init=init, pre=chain_cuda(pre, "v", 8), combine=combine,
                                 block_reduce=block_reduce, finish=finish, post=chain_cuda(post, "v", 8))
    body = kernel + "\n" + _reduce_host(stem, dtype, lastdim, is_index, keepdim, dim_index, threads)
    desc = f"{name} over dim {dim_index if not lastdim else -1}"
    problem = ProblemSpec(doc=f"Computes {desc}" + (" with fused pointwise ops." if fused else "."), init_params=[],
                          init_body="", forward_params=["x"], forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(dims, dtype)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=lastdim and not is_index),
                              signature=f"torch::Tensor {stem}(torch::Tensor x)", init_params=[], init_body="",
                              forward_params=["x"], forward_body=f"return {stem}_ext.{stem}(x.contiguous())")
    family = "reduce_" + name if name not in ("argmax", "argmin") else name
    composition = ">".join(filter(None, [chain_signature(pre), f"{name}[{'last' if lastdim else 'mid'}]",
                                         chain_signature(post)]))
    return make_pair(family, ["reduction"] + chain_tags(pre) + chain_tags(post), 2 if fused else 1, composition,
                     dtype, problem, candidate)


def gen_reductions(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        name = rng.choice(list(REDUCTIONS))
        if name in ("argmax", "argmin"):
            # exact pre-ops only, in fp32: rounding a transcendental differently would move ties and indices
            pre = random_chain(rng, rng.choice((0, 0, 1)), ["relu", "abs", "scale", "shift", "square"])
            yield reduction_pair(rng, name, pre, [], FP32)
            continue
        pre = random_chain(rng, rng.choice((0, 0, 1, 2)))
        post = random_chain(rng, rng.choice((0, 0, 1)), ["tanh", "sigmoid", "relu", "scale", "shift", "softplus"])
        yield reduction_pair(rng, name, pre, post, pick_dtype(rng, 0.25))


# ---------------------------------------------------------------- softmax family

SOFTMAX_KERNEL = """
// One block per row: row max, then sum of exp, then the normalised write (three passes over an L2-resident row).
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t n) {{
    const int64_t base = (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(x[base + c]);
{pre}
        m = fmaxf(m, v);
    }}
    m = block_max(m);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(x[base + c]);
{pre}
        s += expf(v - m);
    }}
    s = block_sum(s);
{norm_const}
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = load_f(x[base + c]);
{pre}
        v = {out_expr};
{post}
        y[base + c] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x{extra_args}) {{
{checks}
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.size(-1);
    const int64_t rows = x.numel() / n;
{extra_checks}
    {stem}_kernel<<<(unsigned)rows, {threads}, 0, {stream}>>>({xp}, {extra_ptrs}{yp}, n);
{launch_check}
    return y;
}}
"""

SOFTMAX_PRE = {
    # name: (torch pre-expression on x, cuda pre statement, uses a bias parameter)
    "plain": ("", "", False),
    "scaled": ("x = x * {s}", "        v = v * {sf};", False),
    "temperature": ("x = x / {t}", "        v = v / {tf};", False),
    "softmin": ("x = -x", "        v = -v;", False),
    "bias": ("x = x + self.bias", "        v = v + load_f(bias[c]);", True),
}


def softmax_pair(rng: random.Random, log: bool, pre_kind: str, post: list, dtype: DType) -> SeedPair:
    from .ops import cf
    dims, consts, cols = pick_rows(rng)
    s = rng.choice((0.125, 0.5, 2.0, 0.0625))
    t = rng.choice((0.7, 2.0, 1.5))
    torch_pre, cuda_pre, has_bias = SOFTMAX_PRE[pre_kind]
    torch_pre = torch_pre.format(s=s, t=t)
    cuda_pre = cuda_pre.format(sf=cf(s), tf=cf(t))
    name = "log_softmax" if log else "softmax"
    stem = f"{name}_{pre_kind}" + ("_post" if post else "")
    fwd = [torch_pre] if torch_pre else []
    fwd.append(f"x = torch.{name}(x, dim=-1)")
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    init_params, init_body, init_inputs = ([], "", [])
    if has_bias:
        init_params, init_inputs = ["dim"], ["dim"]
        init_body = "self.bias = nn.Parameter(0.5 * torch.randn(dim" + (f", dtype={dtype.torch}" if dtype is not FP32 else "") + "))"
    extra_params = "const elem_t* __restrict__ bias, " if has_bias else ""
    extra_args = ", torch::Tensor bias" if has_bias else ""
    extra_ptrs = ptr("bias") + ", " if has_bias else ""
    extra_checks = (host_checks(stem, ["bias"], dtype) + f'\n    TORCH_CHECK(bias.numel() == n, "{stem}: bias must have x.size(-1) elements");') if has_bias else ""
    out_expr = "v - m - log_s" if log else "expf(v - m) * inv"
    norm_const = "    const float log_s = logf(s);" if log else "    const float inv = 1.f / s;"
    body = SOFTMAX_KERNEL.format(stem=stem, extra_params=extra_params, pre=cuda_pre, out_expr=out_expr,
                                 norm_const=norm_const,
                                 post=chain_cuda(post, "v", 8), extra_args=extra_args,
                                 checks=host_checks(stem, ["x"], dtype), extra_checks=extra_checks,
                                 threads=row_threads(cols), stream=STREAM, xp=ptr("x"), extra_ptrs=extra_ptrs,
                                 yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    fwd_call = f"{stem}_ext.{stem}(x.contiguous()" + (", self.bias)" if has_bias else ")")
    problem = ProblemSpec(doc=f"{name} over the last dim ({pre_kind} input)" + (" followed by pointwise ops." if post else "."),
                          init_params=init_params, init_body=init_body, forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts, inputs=[tensor_input(dims, dtype)],
                          init_inputs=init_inputs)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                              signature=f"torch::Tensor {stem}(torch::Tensor x{extra_args})",
                              init_params=init_params, init_body=init_body, forward_params=["x"],
                              forward_body=f"return {fwd_call}")
    fused = pre_kind != "plain" or bool(post)
    fams = [name] + (["softmin"] if pre_kind == "softmin" else []) + chain_tags(post)
    composition = ">".join(filter(None, [pre_kind if pre_kind != "plain" else "", name, chain_signature(post)]))
    return make_pair(name, fams, 2 if fused else 1, composition, dtype, problem, candidate)


def gen_softmax(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "clamp", "square", "tanh"])
        yield softmax_pair(rng, rng.random() < 0.4, rng.choice(list(SOFTMAX_PRE)), post, pick_dtype(rng, 0.3))


# ---------------------------------------------------------------- layer norm / rms norm / L2 normalise

ROWNORM_KERNEL = """
// One block per row. {doc}
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t n, float eps) {{
    const int64_t base = (int64_t)blockIdx.x * n;
{stats}
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = {load};
{write}
{post}
        y[base + c] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x{extra_args}, double eps) {{
{checks}
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.size(-1);
    const int64_t rows = x.numel() / n;
{extra_checks}
    {stem}_kernel<<<(unsigned)rows, {threads}, 0, {stream}>>>({xp}, {extra_ptrs}{yp}, n, (float)eps);
{launch_check}
    return y;
}}
"""

MEAN_VAR_STATS = """    float s = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += {load};
    const float mean = block_sum(s) / (float)n;
    float q = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{ const float d = {load} - mean; q += d * d; }}
    const float rstd = rsqrtf(block_sum(q) / (float)n + eps);"""

RMS_STATS = """    float q = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{ const float v = {load}; q += v * v; }}
    const float rstd = rsqrtf(block_sum(q) / (float)n + eps);"""

L2_STATS = """    float q = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{ const float v = {load}; q += v * v; }}
    const float inv = 1.f / fmaxf(sqrtf(block_sum(q)), eps);"""

ROWNORMS = {
    # kind: (stats template, write statement, torch forward lines, params (name, init expr), doc)
    "layer_norm": (MEAN_VAR_STATS, "        v = (v - mean) * rstd * load_f(weight[c]) + load_f(bias[c]);",
                   ["x = F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)"],
                   [("weight", "1.0 + 0.1 * torch.randn(dim{dt})"), ("bias", "0.1 * torch.randn(dim{dt})")],
                   "Two-pass mean / variance (biased), then the affine write."),
    "rms_norm": (RMS_STATS, "        v = v * rstd * load_f(weight[c]);",
                 ["x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight"],
                 [("weight", "1.0 + 0.1 * torch.randn(dim{dt})")], "Root-mean-square statistics, then scale."),
    "l2_normalize": (L2_STATS, "        v = v * inv;", ["x = F.normalize(x, p=2.0, dim=-1, eps=self.eps)"], [],
                     "x / max(||x||_2, eps)."),
}


def rownorm_pair(rng: random.Random, kind: str, residual: bool, post: list, dtype: DType) -> SeedPair:
    dims, consts, cols = pick_rows(rng)
    stats, write, torch_lines, params, doc = ROWNORMS[kind]
    eps = {"l2_normalize": 1e-12}.get(kind, rng.choice((1e-5, 1e-6)))
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    load = "(load_f(x[base + c]) + load_f(res[base + c]))" if residual else "load_f(x[base + c])"
    init_lines = [f"self.{p} = nn.Parameter({expr.format(dt=dt)})" for p, expr in params] + ["self.eps = eps"]
    fwd = (["x = x + residual"] if residual else []) + torch_lines
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    stem = kind + ("_residual" if residual else "") + ("_post" if post else "")
    tensors = (["res"] if residual else []) + [p for p, _ in params]
    extra_params = "".join(f"const elem_t* __restrict__ {t}, " for t in tensors)
    extra_args = "".join(f", torch::Tensor {t}" for t in tensors)
    extra_ptrs = "".join(ptr(t) + ", " for t in tensors)
    extra_checks = host_checks(stem, tensors, dtype) if tensors else ""
    for p, _ in params:
        extra_checks += f'\n    TORCH_CHECK({p}.numel() == n, "{stem}: {p} must have x.size(-1) elements");'
    if residual:
        extra_checks += f'\n    TORCH_CHECK(res.numel() == x.numel(), "{stem}: residual must match x");'
    body = ROWNORM_KERNEL.format(doc=doc, stem=stem, extra_params=extra_params, stats=stats.format(load=load),
                                 load=load, write=write, post=chain_cuda(post, "v", 8), extra_args=extra_args,
                                 checks=host_checks(stem, ["x"], dtype), extra_checks=extra_checks,
                                 threads=row_threads(cols), stream=STREAM, xp=ptr("x"), extra_ptrs=extra_ptrs,
                                 yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    call_args = ["x.contiguous()"] + (["residual.contiguous()"] if residual else []) + [f"self.{p}" for p, _ in params]
    fwd_params = ["x"] + (["residual"] if residual else [])
    inputs = [tensor_input(dims, dtype)] * (2 if residual else 1)
    problem = ProblemSpec(doc=f"{kind}" + (" of x + residual" if residual else "") + " over the last dim.",
                          init_params=["dim", "eps"], init_body="\n".join(init_lines), forward_params=fwd_params,
                          forward_body="\n".join(fwd), constants=consts, inputs=inputs,
                          init_inputs=["dim", repr(eps)])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                              signature=f"torch::Tensor {stem}(torch::Tensor x{extra_args}, double eps)",
                              init_params=["dim", "eps"], init_body="\n".join(init_lines), forward_params=fwd_params,
                              forward_body=f"return {stem}_ext.{stem}({', '.join(call_args)}, self.eps)")
    fused = residual or bool(post)
    fams = [kind] + (["residual_add"] if residual else []) + chain_tags(post)
    composition = ">".join(filter(None, ["residual_add" if residual else "", kind, chain_signature(post)]))
    return make_pair(kind, fams, 2 if fused else 1, composition, dtype, problem, candidate)


def gen_rownorms(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        kind = rng.choice(list(ROWNORMS))
        post = random_chain(rng, rng.choice((0, 0, 1, 2)))
        yield rownorm_pair(rng, kind, rng.random() < 0.35, post, pick_dtype(rng, 0.35))


# ---------------------------------------------------------------- channel norms on [N, C, H, W]

NCHW_SHAPES = [(16, 64, 32, 32), (8, 32, 64, 64), (32, 128, 16, 16), (4, 256, 28, 28), (64, 16, 24, 24),
               (2, 64, 112, 112), (8, 96, 30, 30)]

BATCHNORM_KERNEL = """
// Inference batch norm folded into one pass: per-channel scale/shift from running stats, fused epilogue.
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

torch::Tensor {stem}(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight,
                     torch::Tensor bias, double eps) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: x must be [N, C, H, W]");
    const int64_t C = x.size(1), HW = x.size(2) * x.size(3), total = x.numel();
    TORCH_CHECK(mean.numel() == C && var.numel() == C && weight.numel() == C && bias.numel() == C,
                "{stem}: per-channel tensors must have C elements");
    auto y = torch::empty_like(x);
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({xp}, {mp}, {vp}, {wp}, {bp}, {yp}, total, C, HW, (float)eps);
{launch_check}
    return y;
}}
"""

GROUPNORM_KERNEL = """
// One block per (sample, group): the group's channels are one contiguous chunk of (C / G) * H * W values.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, {extra_params}elem_t* __restrict__ y, int64_t C,
                              int64_t HW, int64_t groups, float eps) {{
    const int64_t cpg = C / groups, count = cpg * HW;
    const int64_t base = (int64_t)blockIdx.x * count;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += load_f(x[base + i]);
    const float mean = block_sum(s) / (float)count;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {{ const float d = load_f(x[base + i]) - mean; q += d * d; }}
    const float rstd = rsqrtf(block_sum(q) / (float)count + eps);
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {{
        float v = (load_f(x[base + i]) - mean) * rstd;
{affine}
{post}
        y[base + i] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x{extra_args}, int64_t groups, double eps) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: x must be [N, C, H, W]");
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(C % groups == 0, "{stem}: channels must divide into groups");
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    {stem}_kernel<<<(unsigned)(N * groups), 512, 0, {stream}>>>({xp}, {extra_ptrs}{yp}, C, HW, groups, (float)eps);
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
    init = "\n".join([f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels{dt}))",
                      f"self.bias = nn.Parameter(0.1 * torch.randn(channels{dt}))",
                      f'self.register_buffer("running_mean", 0.1 * torch.randn(channels{dt}))',
                      f'self.register_buffer("running_var", 0.5 + torch.rand(channels{dt}))',
                      "self.eps = eps"])
    fwd = ["x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps)"]
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    stem = "batch_norm_infer" + ("_fused" if post else "")
    body = BATCHNORM_KERNEL.format(stem=stem, post=chain_cuda(post, "v", 8),
                                   checks=host_checks(stem, ["x", "mean", "var", "weight", "bias"], dtype),
                                   grid=grid_1d("total"), stream=STREAM, xp=ptr("x"), mp=ptr("mean"), vp=ptr("var"),
                                   wp=ptr("weight"), bp=ptr("bias"), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="Batch norm in inference mode (running statistics)" + (" with fused pointwise ops." if post else "."),
                          init_params=["channels", "eps"], init_body=init, forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts, inputs=[x_in],
                          init_inputs=["channels", repr(eps)])
    candidate = CandidateSpec(
        stem=stem, cuda_body=body, prelude=cuda_prelude(dtype),
        signature=f"torch::Tensor {stem}(torch::Tensor x, torch::Tensor mean, torch::Tensor var, torch::Tensor weight, torch::Tensor bias, double eps)",
        init_params=["channels", "eps"], init_body=init, forward_params=["x"],
        forward_body=f"return {stem}_ext.{stem}(x.contiguous(), self.running_mean, self.running_var, self.weight, self.bias, self.eps)")
    return make_pair("batch_norm", ["batch_norm"] + chain_tags(post), 2 if post else 1,
                     ">".join(filter(None, ["batch_norm", chain_signature(post)])), dtype, problem, candidate)


def groupnorm_pair(rng: random.Random, instance: bool, post: list, dtype: DType) -> SeedPair:
    _, consts, x_in = nchw_inputs(rng, dtype)
    c = consts["channels"]
    groups = c if instance else rng.choice([g for g in (2, 4, 8, 16, 32) if c % g == 0])
    eps = 1e-5
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    if instance:
        init_params, init_inputs = ["eps"], [repr(eps)]
        init = "self.eps = eps"
        fwd = ["x = F.instance_norm(x, eps=self.eps)"]
        tensors, affine = [], ""
        call = f"x.contiguous(), x.shape[1], self.eps"
    else:
        init_params, init_inputs = ["channels", "groups", "eps"], ["channels", str(groups), repr(eps)]
        init = "\n".join([f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels{dt}))",
                          f"self.bias = nn.Parameter(0.1 * torch.randn(channels{dt}))",
                          "self.groups = groups", "self.eps = eps"])
        fwd = ["x = F.group_norm(x, self.groups, self.weight, self.bias, self.eps)"]
        tensors, affine = ["weight", "bias"], ("        const int64_t c = ((int64_t)blockIdx.x % groups) * cpg + i / HW;\n"
                                               "        v = v * load_f(weight[c]) + load_f(bias[c]);")
        call = "x.contiguous(), self.weight, self.bias, self.groups, self.eps"
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    kind = "instance_norm" if instance else "group_norm"
    stem = kind + ("_fused" if post else "")
    extra_checks = host_checks(stem, tensors, dtype)
    body = GROUPNORM_KERNEL.format(
        stem=stem, extra_params="".join(f"const elem_t* __restrict__ {t}, " for t in tensors), affine=affine,
        post=chain_cuda(post, "v", 8), extra_args="".join(f", torch::Tensor {t}" for t in tensors),
        checks=host_checks(stem, ["x"], dtype) + ("\n" + extra_checks if extra_checks else ""),
        stream=STREAM, xp=ptr("x"), extra_ptrs="".join(ptr(t) + ", " for t in tensors), yp=ptr("y", False),
        launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{kind} over [N, C, H, W]" + (" with fused pointwise ops." if post else "."),
                          init_params=init_params, init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[x_in], init_inputs=init_inputs)
    sig_args = "".join(f", torch::Tensor {t}" for t in tensors)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                              signature=f"torch::Tensor {stem}(torch::Tensor x{sig_args}, int64_t groups, double eps)",
                              init_params=init_params, init_body=init, forward_params=["x"],
                              forward_body=f"return {stem}_ext.{stem}({call})")
    return make_pair(kind, [kind] + chain_tags(post), 2 if post else 1,
                     ">".join(filter(None, [kind, chain_signature(post)])), dtype, problem, candidate)


def gen_channel_norms(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        post = random_chain(rng, rng.choice((0, 1, 1, 2)))
        r = rng.random()
        dtype = pick_dtype(rng, 0.25)
        if r < 0.4:
            yield batchnorm_pair(rng, post, dtype)
        else:
            yield groupnorm_pair(rng, r > 0.75, post, dtype)


# ---------------------------------------------------------------- cosine similarity

COSINE_KERNEL = """
__global__ void {stem}_kernel(const elem_t* __restrict__ a, const elem_t* __restrict__ b, elem_t* __restrict__ out,
                              int64_t n, float eps) {{
    const int64_t base = (int64_t)blockIdx.x * n;
    float dot = 0.f, na = 0.f, nb = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {{
        const float u = load_f(a[base + c]), w = load_f(b[base + c]);
        dot += u * w; na += u * u; nb += w * w;
    }}
    dot = block_sum(dot);
    na = block_sum(na);
    nb = block_sum(nb);
    if (threadIdx.x == 0) {{
        float v = dot / (fmaxf(sqrtf(na), eps) * fmaxf(sqrtf(nb), eps));
{post}
        out[blockIdx.x] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor a, torch::Tensor b) {{
{checks}
    TORCH_CHECK(a.sizes() == b.sizes(), "{stem}: a and b must have the same shape");
    const int64_t n = a.size(-1), rows = a.numel() / n;
    auto out = torch::empty(a.sizes().slice(0, a.dim() - 1), a.options());
    if (rows == 0) return out;
    {stem}_kernel<<<(unsigned)rows, {threads}, 0, {stream}>>>({ap}, {bp}, {op}, n, 1e-8f);
{launch_check}
    return out;
}}
"""


def gen_cosine(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        dims, consts, cols = pick_rows(rng)
        dtype = pick_dtype(rng, 0.2)
        post = random_chain(rng, rng.choice((0, 1)), ["scale", "shift", "relu", "square", "abs"])
        stem = "cosine_similarity" + ("_post" if post else "")
        fwd = ["x = F.cosine_similarity(a, b, dim=-1)"] + ([chain_torch(post, "x")] if post else []) + ["return x"]
        body = COSINE_KERNEL.format(stem=stem, post=chain_cuda(post, "v", 8), checks=host_checks(stem, ["a", "b"], dtype),
                                    threads=row_threads(cols), stream=STREAM, ap=ptr("a"), bp=ptr("b"),
                                    op=ptr("out", False), launch_check=LAUNCH_CHECK)
        problem = ProblemSpec(doc="Cosine similarity of rows.", init_params=[], init_body="", forward_params=["a", "b"],
                              forward_body="\n".join(fwd), constants=consts,
                              inputs=[tensor_input(dims, dtype)] * 2, init_inputs=[])
        candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                                  signature=f"torch::Tensor {stem}(torch::Tensor a, torch::Tensor b)", init_params=[],
                                  init_body="", forward_params=["a", "b"],
                                  forward_body=f"return {stem}_ext.{stem}(a.contiguous(), b.contiguous())")
        yield make_pair("cosine_similarity", ["cosine_similarity", "vector_normalize"] + chain_tags(post),
                        2 if post else 1, ">".join(filter(None, ["cosine_similarity", chain_signature(post)])),
                        dtype, problem, candidate)


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

SCAN_SHAPES = [(4096, 256), (2048, 512), (1024, 1024), (512, 2048), (8192, 128), (256, 4096), (3000, 300)]
CUMPROD_SHAPES = [(4096, 32), (8192, 16), (2048, 64), (1024, 48)]


def scan_pair(rng: random.Random, kind: str, pre: list, post: list, dtype: DType) -> SeedPair:
    b, d = rng.choice(CUMPROD_SHAPES if kind == "cumprod" else SCAN_SHAPES)
    consts = {"batch_size": b, "dim": d}
    fwd = [chain_torch(pre, "x")] if pre else []
    if kind == "cumsum":
        fwd.append("x = torch.cumsum(x, dim=-1)")
        op, identity, src = "a + b", "0.f", "c"
    elif kind == "cumprod":
        fwd.append("x = torch.cumprod(x, dim=-1)")
        op, identity, src = "a * b", "1.f", "c"
    elif kind == "reverse_cumsum":
        fwd.append("x = torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), dim=-1), dims=[-1])")
        op, identity, src = "a + b", "0.f", "(n - 1 - c)"
    elif kind == "cummax":
        fwd.append("x = torch.cummax(x, dim=-1).values")
        op, identity, src = "fmaxf(a, b)", "-INFINITY", "c"
    else:  # logcumsumexp
        fwd.append("x = torch.logcumsumexp(x, dim=-1)")
        op = "a == -INFINITY ? b : (b == -INFINITY ? a : fmaxf(a, b) + log1pf(expf(-fabsf(a - b))))"
        identity, src = "-INFINITY", "c"
    if post:
        fwd.append(chain_torch(post, "x"))
    fwd.append("return x")
    stem = kind + ("_fused" if pre or post else "")
    body = SCAN_KERNEL.format(op=op, stem=stem, src_index=src, pre=chain_cuda(pre, "v", 8), identity=identity,
                              post=chain_cuda(post, "v", 8), checks=host_checks(stem, ["x"], dtype), stream=STREAM,
                              xp=ptr("x"), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    x_kind = "positive" if kind == "cumprod" else "randn"
    problem = ProblemSpec(doc=f"{kind} along the last dim" + (" with fused pointwise ops." if pre or post else "."),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(["batch_size", "dim"], dtype, x_kind)],
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype),
                              signature=f"torch::Tensor {stem}(torch::Tensor x)", init_params=[], init_body="",
                              forward_params=["x"], forward_body=f"return {stem}_ext.{stem}(x.contiguous())")
    fused = bool(pre or post)
    return make_pair(kind, ["scan"] + chain_tags(pre) + chain_tags(post), 2 if fused else 1,
                     ">".join(filter(None, [chain_signature(pre), kind, chain_signature(post)])), dtype, problem,
                     candidate)


def gen_scans(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        kind = rng.choice(("cumsum", "cumsum", "cumprod", "reverse_cumsum", "cummax", "logcumsumexp"))
        pool = ["relu", "abs", "sigmoid", "scale", "square", "tanh"]
        pre = random_chain(rng, rng.choice((0, 1)), pool if kind != "cumprod" else ["sigmoid", "hardsigmoid"])
        post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "tanh", "relu"])
        yield scan_pair(rng, kind, pre, post, FP32 if rng.random() < 0.85 else pick_dtype(rng, 1.0))


GENERATORS = {
    "reduction": (gen_reductions, 900),
    "softmax": (gen_softmax, 500),
    "row_norm": (gen_rownorms, 700),
    "channel_norm": (gen_channel_norms, 500),
    "cosine_similarity": (gen_cosine, 80),
    "scan": (gen_scans, 250),
}
