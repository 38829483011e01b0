"""Elementwise families: single activations, fused activation chains, broadcast binary ops, where/clamp selects.
One vectorised (16-byte packs) grid-stride kernel per pair; the whole chain is applied in registers."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .ops import ALL_OPS, OPS, chain_cuda, chain_signature, chain_tags, chain_torch, random_chain
from .render import (BF16, FP16, FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair,
                     cuda_prelude, grid_1d, host_checks, make_pair, ptr, tensor_input)

SHAPES_2D = [(4096, 1024), (2048, 2048), (1024, 4096), (512, 8192), (8192, 512), (256, 16384), (16384, 256),
             (1000, 1000), (3000, 777)]
SHAPES_3D = [(64, 128, 512), (32, 256, 256), (128, 64, 1024), (16, 512, 384), (8, 1024, 768), (50, 100, 333)]


def pick_dtype(rng: random.Random, half_share: float = 0.35) -> DType:
    r = rng.random()
    if r < half_share / 2:
        return FP16
    if r < half_share:
        return BF16
    return FP32


def pick_shape(rng: random.Random) -> tuple[list[str], dict[str, int]]:
    """Size-constant names and values for a 2-D or 3-D tensor."""
    if rng.random() < 0.6:
        b, d = rng.choice(SHAPES_2D)
        return ["batch_size", "dim"], {"batch_size": b, "dim": d}
    b, s, d = rng.choice(SHAPES_3D)
    return ["batch_size", "seq_len", "dim"], {"batch_size": b, "seq_len": s, "dim": d}


VEC_KERNEL = """
constexpr int VEC = 16 / sizeof(elem_t);
struct alignas(16) Pack {{ elem_t v[VEC]; }};

__device__ __forceinline__ float apply_chain(float v) {{
{chain}
    return v;
}}

__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int64_t n, bool vectorized) {{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n_vec = vectorized ? n / VEC : 0;
    const Pack* __restrict__ xv = reinterpret_cast<const Pack*>(x);
    Pack* __restrict__ yv = reinterpret_cast<Pack*>(y);
    for (int64_t i = first; i < n_vec; i += stride) {{
        Pack p = xv[i];
        #pragma unroll
        for (int j = 0; j < VEC; ++j) p.v[j] = store_f(apply_chain(load_f(p.v[j])));
        yv[i] = p;
    }}
    for (int64_t i = n_vec * VEC + first; i < n; i += stride) y[i] = store_f(apply_chain(load_f(x[i])));
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const bool vectorized = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
    const int64_t work = vectorized ? n / VEC + n % VEC : n;
    const int blocks = {grid};
    {stem}_kernel<<<blocks, {threads}, 0, {stream}>>>({xp}, {yp}, n, vectorized);
{launch_check}
    return y;
}}
"""


def unary_chain_pair(rng: random.Random, chain, dtype: DType, threads: int) -> SeedPair:
    dims, consts = pick_shape(rng)
    single = len(chain) == 1
    family = chain[0].name if single else "elementwise_chain"
    stem = f"{family}_fused" if not single else f"{family}_op"
    desc = " -> ".join(op.tag for op in chain)
    problem = ProblemSpec(
        doc=f"Applies {desc} elementwise.", init_params=[], init_body="", forward_params=["x"],
        forward_body=chain_torch(chain, "x") + "\nreturn x", constants=consts,
        inputs=[tensor_input(dims, dtype)], init_inputs=[])
    body = VEC_KERNEL.format(chain=chain_cuda(chain, "v"), stem=stem, checks=host_checks(stem, ["x"], dtype),
                             grid=grid_1d("work", threads), threads=threads, stream=STREAM, xp=ptr("x"),
                             yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype), signature=f"torch::Tensor {stem}(torch::Tensor x)",
                              init_params=[], init_body="", forward_params=["x"],
                              forward_body=f"return {stem}_ext.{stem}(x.contiguous())")
    return make_pair(family, chain_tags(chain) + (["elementwise_chain"] if not single else []),
                     1 if single else 2, chain_signature(chain), dtype, problem, candidate)


def gen_single_activation(rng: random.Random) -> Iterator[SeedPair]:
    """Every op with every constant variant, each in a few dtypes, shapes and block sizes."""
    while True:
        name = rng.choice(ALL_OPS)
        op = rng.choice(OPS[name])
        yield unary_chain_pair(rng, [op], pick_dtype(rng), rng.choice((128, 256, 512)))


def gen_activation_chain(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        chain = random_chain(rng, rng.choice((2, 2, 3, 3, 4)))
        yield unary_chain_pair(rng, chain, pick_dtype(rng), rng.choice((128, 256, 512)))


BINARY_OPS = {
    "add": ("{a} + {b}", "{a} + {b}"),
    "sub": ("{a} - {b}", "{a} - {b}"),
    "mul": ("{a} * {b}", "{a} * {b}"),
    "div": ("{a} / {b}", "{a} / {b}"),
    "maximum": ("torch.maximum({a}, {b})", "fmaxf({a}, {b})"),
    "minimum": ("torch.minimum({a}, {b})", "fminf({a}, {b})"),
    "squared_difference": ("torch.square({a} - {b})", "({a} - {b}) * ({a} - {b})"),
    "sigmoid_gate": ("{a} * torch.sigmoid({b})", "{a} * (1.f / (1.f + expf(-{b})))"),
    "lerp": ("torch.lerp({a}, {b}, 0.3)", "{a} + 0.3f * ({b} - {a})"),
    "where": ("torch.where({a} > {b}, {a}, {b} * 0.5)", "({a} > {b} ? {a} : {b} * 0.5f)"),
    "scaled_add": ("torch.add({a}, {b}, alpha=0.5)", "{a} + 0.5f * {b}"),
}

BINARY_KERNEL = """
constexpr int VEC = 16 / sizeof(elem_t);
struct alignas(16) Pack {{ elem_t v[VEC]; }};

__device__ __forceinline__ float combine(float a, float b) {{
    float v = {combine};
{chain}
    return v;
}}

// y is broadcast against x: {mode_doc}
__global__ void {stem}_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ y, elem_t* __restrict__ out,
                              int64_t n, int64_t inner, bool vectorized) {{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n_vec = vectorized ? n / VEC : 0;
    const Pack* __restrict__ xv = reinterpret_cast<const Pack*>(x);
    Pack* __restrict__ ov = reinterpret_cast<Pack*>(out);
    for (int64_t i = first; i < n_vec; i += stride) {{
        Pack p = xv[i];
{vec_load}
        #pragma unroll
        for (int j = 0; j < VEC; ++j) p.v[j] = store_f(combine(load_f(p.v[j]), {vec_b}));
        ov[i] = p;
    }}
    for (int64_t e = n_vec * VEC + first; e < n; e += stride) out[e] = store_f(combine(load_f(x[e]), load_f(y[{y_index}])));
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor y) {{
{checks}
    TORCH_CHECK({y_numel_check}, "{stem}: y has ", y.numel(), " elements, expected ", {y_expect});
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const int64_t inner = x.size(-1);
    const bool vectorized = inner % VEC == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
    const int64_t work = vectorized ? n / VEC + n % VEC : n;
    const int blocks = {grid};
    {stem}_kernel<<<blocks, {threads}, 0, {stream}>>>({xp}, {yp}, {op}, n, inner, vectorized);
{launch_check}
    return out;
}}
"""

BROADCAST_MODES = {
    # mode: (doc, y shape as a function of x dims, y index expr, vectorised load, vectorised b expr, numel check)
    "same": ("same shape as x", lambda dims: dims, "e",
             "        const Pack q = reinterpret_cast<const Pack*>(y)[i];", "load_f(q.v[j])",
             "y.numel() == x.numel()", "x.numel()"),
    "row": ("one value per last-dim position (shape [dim])", lambda dims: dims[-1:], "e % inner",
            "        const Pack q = reinterpret_cast<const Pack*>(y)[(i * VEC % inner) / VEC];", "load_f(q.v[j])",
            "y.numel() == x.size(-1)", "x.size(-1)"),
    "col": ("one value per row (shape [..., 1])", lambda dims: dims[:-1] + ["1"], "e / inner",
            "        const float yb = load_f(y[i * VEC / inner]);", "yb", "y.numel() * x.size(-1) == x.numel()", "x.numel() / x.size(-1)"),
}


def binary_pair(rng: random.Random, op_name: str, mode: str, chain, dtype: DType, threads: int) -> SeedPair:
    dims, consts = pick_shape(rng)
    torch_expr, cuda_expr = BINARY_OPS[op_name]
    doc, yshape, y_index, vec_load, vec_b, numel_check, y_expect = BROADCAST_MODES[mode]
    y_dims = yshape(dims)
    y_kind = "positive" if op_name == "div" else "randn"
    fused = bool(chain) or mode != "same"
    family = op_name if not fused else "binary_broadcast"
    stem = f"{op_name}_{mode}" + ("_fused" if chain else "")
    fwd = f"x = {torch_expr.format(a='x', b='y')}"
    if chain:
        fwd += "\n" + chain_torch(chain, "x")
    problem = ProblemSpec(
        doc=f"Computes {op_name}(x, y) with y broadcast ({doc})" + (f", then {chain_signature(chain)}." if chain else "."),
        init_params=[], init_body="", forward_params=["x", "y"], forward_body=fwd + "\nreturn x", constants=consts,
        inputs=[tensor_input(dims, dtype), tensor_input(y_dims, dtype, y_kind)], init_inputs=[])
    body = BINARY_KERNEL.format(
        combine=cuda_expr.format(a="a", b="b"), chain=chain_cuda(chain, "v"), mode_doc=doc, stem=stem,
        vec_load=vec_load, vec_b=vec_b, y_index=y_index, checks=host_checks(stem, ["x", "y"], dtype),
        y_numel_check=numel_check, y_expect=y_expect,
        grid=grid_1d("work", threads), threads=threads, stream=STREAM, xp=ptr("x"), yp=ptr("y"),
        op=ptr("out", False), launch_check=LAUNCH_CHECK)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype),
                              signature=f"torch::Tensor {stem}(torch::Tensor x, torch::Tensor y)", init_params=[],
                              init_body="", forward_params=["x", "y"],
                              forward_body=f"return {stem}_ext.{stem}(x.contiguous(), y.contiguous())")
    families = [op_name] + (["broadcast"] if mode != "same" else []) + chain_tags(chain)
    if op_name == "where":
        families.append("where")
    composition = ">".join([f"{op_name}[{mode}]"] + ([chain_signature(chain)] if chain else []))
    return make_pair(family, families, 2 if fused else 1, composition, dtype, problem, candidate)


def gen_binary(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        op_name = rng.choice(list(BINARY_OPS))
        mode = rng.choice(list(BROADCAST_MODES))
        chain = random_chain(rng, rng.choice((0, 1, 1, 2, 3)))
        yield binary_pair(rng, op_name, mode, chain, pick_dtype(rng, 0.3), rng.choice((128, 256, 512)))


def gen_clamp_where(rng: random.Random) -> Iterator[SeedPair]:
    """Selects and clamps, alone or inside chains (their own families for the held-out split)."""
    while True:
        head = rng.choice(OPS["clamp"] + OPS["hardtanh"])
        chain = [head] + random_chain(rng, rng.choice((0, 1, 2)))
        rng.shuffle(chain)
        if rng.random() < 0.5:
            yield unary_chain_pair(rng, chain, pick_dtype(rng), 256)
        else:
            yield binary_pair(rng, "where", rng.choice(list(BROADCAST_MODES)), chain, pick_dtype(rng, 0.3), 256)


GENERATORS = {
    "activation": (gen_single_activation, 450),
    "elementwise_chain": (gen_activation_chain, 2400),
    "binary_broadcast": (gen_binary, 1500),
    "clamp_where": (gen_clamp_where, 300),
}
