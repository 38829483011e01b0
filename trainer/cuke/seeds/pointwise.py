"""Pointwise kernels from one spec in several strategies: a grid-stride loop, one thread per element, unrolled
(several elements per thread), 16-byte vectorised packs with a scalar tail, `half2` / `bfloat162` pairs for 16-bit
types, or two kernels with an fp32 intermediate. The spec says which tensors are read and how each is indexed
(`same` shape as the output, `row`: one value per last-dim position, `col`: one value per row), the statements that
compute the result, and the pointwise chain that ends it (where the two-kernel strategy may cut)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .codestyle import CTYPES, MODES_ALIAS, MODES_ALL
from .ops import UnaryOp
from .render import LAUNCH_CHECK, STREAM, cdiv, cuda_prelude, grid_1d, host_checks, ptr

FLOAT_DTYPES = ("fp32", "fp16", "bf16")
PAIR_TYPES = {"fp16": ("__half2", "__half22float2", "__floats2half2_rn"),
              "bf16": ("__nv_bfloat162", "__bfloat1622float2", "__floats2bfloat162_rn")}


@dataclass
class Load:
    """One tensor the kernel reads: its name (host and kernel), element dtype, index mode and the local it loads
    into (float for floating types, the C type otherwise)."""

    tensor: str
    dtype: str
    mode: str = "same"  # same | row | col | custom
    var: str = "a"
    index: str = ""  # custom mode: the C index expression over `i` and the spec's sizes

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass
class PointwiseSpec:
    stem: str
    loads: list[Load]
    body: list[str]  # statements defining the result `v` from the loaded locals
    out_dtype: str
    tail: list[UnaryOp] = field(default_factory=list)  # applied to v after body (the two-kernel cut point)
    result_type: str = "float"  # C type of `v`
    sizes: list[tuple[str, str]] = field(default_factory=list)  # extra int64 kernel parameters: (name, host expr)
    out_shape: str = ""  # host expression of the output sizes when they differ from the first tensor's
    prologue: list[str] = field(default_factory=list)  # per-element statements before the loads (coordinates)

    @property
    def shape_tensor(self) -> str:
        return self.loads[0].tensor

    @property
    def has_broadcast(self) -> bool:
        return any(load.mode in ("row", "col") for load in self.loads)

    @property
    def custom(self) -> bool:
        return bool(self.out_shape) or any(load.mode == "custom" for load in self.loads) or bool(self.prologue)

    @property
    def vectorizable(self) -> bool:
        return (not self.custom and all(load.is_float for load in self.loads) and self.out_dtype in FLOAT_DTYPES
                and self.result_type == "float" and len({load.dtype for load in self.loads} | {self.out_dtype}) == 1)


def choose_strategy(rng: random.Random, spec: PointwiseSpec, numel: int, inner: int) -> str:
    """A strategy that suits the shapes and dtypes: wide packs when every row splits into whole packs, 16-bit pairs
    for half types, two kernels only where there is a chain to cut."""
    vec = 16 // {"fp32": 4, "fp16": 2, "bf16": 2}.get(spec.out_dtype, 4)
    weights = {"grid_stride": 2.0, "thread_per_element": 1.5, "unrolled_ilp": 1.0}
    if spec.vectorizable and (not spec.has_broadcast or inner % vec == 0):
        weights["vectorized"] = 3.0 if numel % vec == 0 else 1.5
        if spec.out_dtype in PAIR_TYPES and (not spec.has_broadcast or inner % 2 == 0):
            weights["half2"] = 2.5
    if len(spec.tail) >= 2 and all(load.mode == "same" for load in spec.loads) and not spec.custom:
        weights["multi_kernel"] = 0.7
    names = list(weights)
    return rng.choices(names, [weights[n] for n in names])[0]


def build_pointwise(spec: PointwiseSpec, strategy: str, rng: random.Random):
    """(kernels + host function with markers, prelude) for `spec` in `strategy`."""
    # the helper takes the loaded values only: bodies that read per-element coordinates stay inline
    helper = strategy == "half2" or (spec.result_type == "float" and not spec.prologue and rng.random() < 0.6)
    threads = rng.choice((128, 256, 256, 512))
    if strategy == "multi_kernel":
        body = _multi_kernel(spec, threads, rng)
        modes = MODES_ALL
    else:
        kernel = _kernel(spec, strategy, helper, rng)
        body = kernel + "\n" + _host(spec, strategy, threads, rng)
        modes = MODES_ALIAS if strategy == "half2" else MODES_ALL
    float_dtype = next((load.dtype for load in spec.loads if load.is_float), spec.out_dtype)
    if float_dtype not in FLOAT_DTYPES:
        from .codestyle import Prelude
        return body, Prelude(dtype=float_dtype, float_only=True)
    return body, cuda_prelude(float_dtype, modes=modes)


# ---------------------------------------------------------------- kernels

def _tensors(spec: PointwiseSpec) -> list[Load]:
    """The distinct tensors the loads read (two loads may read one tensor at different places)."""
    return list({load.tensor: load for load in reversed(spec.loads)}.values())[::-1]


def _param_list(spec: PointwiseSpec, extra: list[str]) -> str:
    params = [f"const {_ctype(load.dtype)}* __restrict__ {load.tensor}" for load in _tensors(spec)]
    params.append(f"{_ctype(spec.out_dtype)}* __restrict__ out")
    params.append("int64_t n")
    if spec.has_broadcast:
        params.append("int64_t inner")
    params += [f"int64_t {name}" for name, _ in spec.sizes]
    return ", ".join(params + extra)


def _ctype(dtype: str) -> str:
    return "elem_t" if dtype in FLOAT_DTYPES else CTYPES[dtype]


def _index(load: Load, i: str) -> str:
    if load.mode == "custom":
        return load.index.replace("@i", i)
    return {"same": i, "row": f"{i} % inner", "col": f"{i} / inner"}[load.mode]


def _scalar_loads(spec: PointwiseSpec, i: str, pad: str) -> list[str]:
    lines = [pad + line.replace("@i", i) for line in spec.prologue]
    for load in spec.loads:
        value = f"{load.tensor}[{_index(load, i)}]"
        if load.is_float:
            lines.append(f"{pad}const float {load.var} = load_f({value});")
        else:
            lines.append(f"{pad}const {CTYPES[load.dtype]} {load.var} = {value};")
    return lines


def _compute(spec: PointwiseSpec, pad: str, include_tail: bool = True) -> list[str]:
    lines = [pad + line for line in spec.body]
    if include_tail:
        lines += [pad + op.cuda_stmt("v") for op in spec.tail]
    return lines


def _store(spec: PointwiseSpec, target: str, value: str = "v") -> str:
    if spec.out_dtype in FLOAT_DTYPES:
        return f"{target} = store_f({value});"
    return f"{target} = ({CTYPES[spec.out_dtype]})({value});"


def _helper_def(spec: PointwiseSpec) -> str:
    params = ", ".join(("float " if load.is_float else f"{CTYPES[load.dtype]} ") + load.var for load in spec.loads)
    lines = [f"__device__ __forceinline__ {spec.result_type} apply_chain({params}) {{"]
    lines += _compute(spec, "    ")
    lines += ["    return v;", "}", "", ""]
    return "\n".join(lines)


def _helper_call(spec: PointwiseSpec, args: list[str] | None = None) -> str:
    return f"apply_chain({', '.join(args or [load.var for load in spec.loads])})"


def _element(spec: PointwiseSpec, i: str, pad: str, helper: bool) -> list[str]:
    """Loads, math and the store of element `i`."""
    lines = _scalar_loads(spec, i, pad)
    if helper:
        lines.append(f"{pad}{_store(spec, f'out[{i}]', _helper_call(spec))}")
    else:
        lines += _compute(spec, pad)
        lines.append(pad + _store(spec, f"out[{i}]"))
    return lines


def _kernel(spec: PointwiseSpec, strategy: str, helper: bool, rng: random.Random) -> str:
    head = _helper_def(spec) if helper else ""
    if strategy == "grid_stride":
        return head + "\n".join([
            f"__global__ void {spec.stem}_kernel({_param_list(spec, [])}) {{",
            "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;",
            "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {",
            *_element(spec, "i", "        ", helper), "    }", "}"]) + "\n"
    if strategy == "thread_per_element":
        return head + "\n".join([
            f"__global__ void {spec.stem}_kernel({_param_list(spec, [])}) {{",
            "    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
            "    if (i >= n) return;", *_element(spec, "i", "    ", helper), "}"]) + "\n"
    if strategy == "unrolled_ilp":
        unroll = rng.choice((2, 4, 4, 8))
        return head + f"constexpr int UNROLL = {unroll};\n\n" + "\n".join([
            f"__global__ void {spec.stem}_kernel({_param_list(spec, [])}) {{",
            "    const int64_t base = (int64_t)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;",
            "    #pragma unroll",
            "    for (int u = 0; u < UNROLL; ++u) {",
            "        const int64_t i = base + (int64_t)u * blockDim.x;",
            "        if (i < n) {", *_element(spec, "i", "            ", helper), "        }", "    }", "}"]) + "\n"
    if strategy == "vectorized":
        return head + _vector_kernel(spec, helper)
    if strategy == "half2":
        return head + _pair_kernel(spec)
    raise ValueError(f"unknown pointwise strategy {strategy}")


def _vector_kernel(spec: PointwiseSpec, helper: bool) -> str:
    lines = [f"__global__ void {spec.stem}_kernel({_param_list(spec, ['bool vectorized'])}) {{",
             "    constexpr int VEC = 16 / sizeof(elem_t);",
             "    struct alignas(16) Pack { elem_t elems[VEC]; };",
             "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;",
             "    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
             "    const int64_t n_vec = vectorized ? n / VEC : 0;",
             "    for (int64_t p = first; p < n_vec; p += stride) {"]
    args = []
    for load in spec.loads:
        if load.mode == "same":
            lines.append(f"        const Pack {load.var}_pack = reinterpret_cast<const Pack*>({load.tensor})[p];")
            args.append(f"load_f({load.var}_pack.elems[j])")
        elif load.mode == "row":
            lines.append(f"        const Pack {load.var}_pack = reinterpret_cast<const Pack*>({load.tensor})"
                         f"[(p * VEC % inner) / VEC];")
            args.append(f"load_f({load.var}_pack.elems[j])")
        else:
            lines.append(f"        const float {load.var}_row = load_f({load.tensor}[p * VEC / inner]);")
            args.append(f"{load.var}_row")
    lines += ["        Pack result;", "        #pragma unroll", "        for (int j = 0; j < VEC; ++j) {"]
    if helper:
        lines.append(f"            result.elems[j] = store_f({_helper_call(spec, args)});")
    else:
        lines += [f"            const float {load.var} = {arg};" for load, arg in zip(spec.loads, args)]
        lines += _compute(spec, "            ")
        lines.append("            result.elems[j] = store_f(v);")
    lines += ["        }", "        reinterpret_cast<Pack*>(out)[p] = result;", "    }",
              "    for (int64_t i = n_vec * VEC + first; i < n; i += stride) {",
              *_element(spec, "i", "        ", helper), "    }", "}"]
    return "\n".join(lines) + "\n"


def _pair_kernel(spec: PointwiseSpec) -> str:
    pair, widen, narrow = PAIR_TYPES[spec.out_dtype]
    lines = [f"__global__ void {spec.stem}_kernel({_param_list(spec, ['bool vectorized'])}) {{",
             "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;",
             "    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
             "    const int64_t n_vec = vectorized ? n / 2 : 0;",
             "    for (int64_t p = first; p < n_vec; p += stride) {"]
    lo, hi = [], []
    for load in spec.loads:
        if load.mode == "col":
            lines.append(f"        const float {load.var}_row = load_f({load.tensor}[p * 2 / inner]);")
            lo.append(f"{load.var}_row")
            hi.append(f"{load.var}_row")
            continue
        index = "p" if load.mode == "same" else "(p * 2 % inner) / 2"
        lines.append(f"        const float2 {load.var}2 = {widen}(reinterpret_cast<const {pair}*>({load.tensor})[{index}]);")
        lo.append(f"{load.var}2.x")
        hi.append(f"{load.var}2.y")
    lines += [f"        reinterpret_cast<{pair}*>(out)[p] = {narrow}({_helper_call(spec, lo)}, {_helper_call(spec, hi)});",
              "    }", "    if (vectorized && first == 0 && (n & 1)) {",
              *_element(spec, "(n - 1)", "        ", True), "    }",
              "    if (!vectorized) {",
              "        for (int64_t i = first; i < n; i += stride) {",
              *_element(spec, "i", "            ", True), "        }", "    }", "}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- host code

def _host_params(spec: PointwiseSpec) -> str:
    return ", ".join(f"torch::Tensor {load.tensor}" for load in _tensors(spec))


def _host_prologue(spec: PointwiseSpec) -> list[str]:
    lines = [f"torch::Tensor {spec.stem}({_host_params(spec)}) {{"]
    by_dtype: dict[str, list[str]] = {}
    for load in _tensors(spec):
        by_dtype.setdefault(load.dtype, []).append(load.tensor)
    lines += [host_checks(spec.stem, tensors, dtype) for dtype, tensors in by_dtype.items()]
    x = spec.shape_tensor
    for load in _tensors(spec)[1:]:
        t = load.tensor
        if load.mode == "same":
            lines.append(f'    TORCH_CHECK({t}.numel() == {x}.numel(), "{spec.stem}: {t} must have as many elements '
                         f'as {x}");')
        elif load.mode == "row":
            lines.append(f'    TORCH_CHECK({t}.numel() == {x}.size(-1), "{spec.stem}: {t} must have {x}.size(-1) '
                         f'elements, got ", {t}.numel());')
        elif load.mode == "col":
            lines.append(f'    TORCH_CHECK({t}.numel() * {x}.size(-1) == {x}.numel(), "{spec.stem}: {t} must hold '
                         f'one value per row of {x}");')
    options = f"{x}.options()" if spec.out_dtype == spec.loads[0].dtype else \
        f"{x}.options().dtype(@@DTYPE|{spec.out_dtype}@@)"
    if spec.out_shape:
        lines.append(f"    auto out = torch::empty({spec.out_shape}, {options});")
    elif spec.out_dtype == spec.loads[0].dtype:
        lines.append(f"    auto out = torch::empty_like({x});")
    else:
        lines.append(f"    auto out = torch::empty({x}.sizes(), {options});")
    lines += ["    const int64_t n = out.numel();", "    if (n == 0) return out;"]
    if spec.has_broadcast:
        lines.append(f"    const int64_t inner = {x}.size(-1);")
    lines += [f"    const int64_t {name} = {expr};" for name, expr in spec.sizes]
    return lines


def _pointers(spec: PointwiseSpec, out: str = "out") -> str:
    args = []
    for load in _tensors(spec):
        args.append(ptr(load.tensor) if load.is_float else f"{load.tensor}.data_ptr<{CTYPES[load.dtype]}>()")
    args.append(ptr(out, False) if spec.out_dtype in FLOAT_DTYPES else f"{out}.data_ptr<{CTYPES[spec.out_dtype]}>()")
    return ", ".join(args)


def _host(spec: PointwiseSpec, strategy: str, threads: int, rng: random.Random) -> str:
    lines = _host_prologue(spec)
    sizes = ", ".join(["n"] + (["inner"] if spec.has_broadcast else []) + [name for name, _ in spec.sizes])
    extra = ""
    if strategy in ("vectorized", "half2"):
        width = "2" if strategy == "half2" else f"(16 / {spec.shape_tensor}.element_size())"
        align = 4 if strategy == "half2" else 16
        tensors = [load.tensor for load in spec.loads if load.mode != "col"] + ["out"]
        cond = " &&\n                            ".join(
            f"reinterpret_cast<uintptr_t>({t}.data_ptr()) % {align} == 0" for t in tensors)
        if spec.has_broadcast:
            cond = f"inner % {'2' if strategy == 'half2' else 'VEC'} == 0 &&\n                            " + cond
        if strategy == "vectorized":
            lines.append(f"    const int64_t VEC = {width};")
        lines.append(f"    const bool vectorized = {cond};")
        per = "2" if strategy == "half2" else "VEC"
        lines.append(f"    const int64_t work = vectorized ? n / {per} + n % {per} : n;")
        lines.append(f"    const int blocks = {grid_1d('work', threads)};")
        extra = ", vectorized"
    elif strategy == "grid_stride":
        lines.append(f"    const int blocks = {grid_1d('n', threads, rng.choice((65535, 4096, 8192, 16384)))};")
    elif strategy == "thread_per_element":
        lines.append(f"    const int blocks = (int)({cdiv('n', threads)});")
    else:  # unrolled
        lines.append(f"    const int blocks = (int)({cdiv('n', f'{threads} * UNROLL')});")
    lines += [f"    {spec.stem}_kernel<<<blocks, {threads}, 0, {STREAM}>>>({_pointers(spec)}, {sizes}{extra});",
              LAUNCH_CHECK, "    return out;", "}"]
    return "\n".join(lines) + "\n"


def _multi_kernel(spec: PointwiseSpec, threads: int, rng: random.Random) -> str:
    """Kernel 1: loads and body and the first half of the tail into an fp32 buffer; kernel 2: the rest."""
    cut = max(1, len(spec.tail) // 2)
    first, second = spec.tail[:cut], spec.tail[cut:]
    stage1 = PointwiseSpec(spec.stem, spec.loads, spec.body, spec.out_dtype, first)
    lines = [f"__global__ void {spec.stem}_stage1({_param_list(stage1, [])}".replace(
        f"{_ctype(spec.out_dtype)}* __restrict__ out", "float* __restrict__ tmp") + ") {",
        "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;",
        "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {",
        *_scalar_loads(stage1, "i", "        "), *_compute(stage1, "        "), "        tmp[i] = v;", "    }", "}",
        "",
        f"__global__ void {spec.stem}_stage2(const float* __restrict__ tmp, {_ctype(spec.out_dtype)}* __restrict__ out, "
        "int64_t n) {",
        "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;",
        "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {",
        "        float v = tmp[i];", *["        " + op.cuda_stmt("v") for op in second],
        "        " + _store(spec, "out[i]"), "    }", "}", ""]
    host = _host_prologue(spec)
    x = spec.shape_tensor
    inputs = ", ".join(ptr(load.tensor) if load.is_float else f"{load.tensor}.data_ptr<{CTYPES[load.dtype]}>()"
                       for load in _tensors(spec))
    out_ptr = ptr("out", False) if spec.out_dtype in FLOAT_DTYPES else f"out.data_ptr<{CTYPES[spec.out_dtype]}>()"
    host += [f"    auto tmp = torch::empty({x}.sizes(), {x}.options().dtype(@@DTYPE|fp32@@));",
             f"    const int blocks = {grid_1d('n', threads)};",
             f"    auto stream = {STREAM};",
             f"    {spec.stem}_stage1<<<blocks, {threads}, 0, stream>>>({inputs}, tmp.data_ptr<float>(), n);",
             LAUNCH_CHECK,
             f"    {spec.stem}_stage2<<<blocks, {threads}, 0, stream>>>(tmp.data_ptr<float>(), {out_ptr}, n);",
             LAUNCH_CHECK, "    return out;", "}"]
    return "\n".join(lines + host) + "\n"
