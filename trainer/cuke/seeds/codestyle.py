"""How a candidate is written, drawn per pair from a seeded RNG: names (snake, camel or terse, from synonym pools),
comments (none, terse, explanatory), input checks (inline, macros, a helper function, minimal), launch error checks,
grid-size arithmetic, how the element type is handled (an alias, a typedef, plain types, C++ templates or
AT_DISPATCH), the stream and pointer spellings, and the `load_inline` form (functions=[...] or a PYBIND11_MODULE,
flags, verbose). None of it changes what the kernel computes.

Kernel templates write their host code with markers this module resolves (`@@CHECKS|fn|x,y|fp32@@`,
`@@PTR|x|c@@`, `@@GRID|n|256|65535@@`, `@@CDIV|n|256@@`, `@@STREAM@@`, `@@LAUNCH_CHECK@@`) and their identifiers
with the canonical names of `vocab.IDENTIFIERS`, which are renamed last."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from .vocab import (CHECK_MESSAGES, CPP_RESERVED, IDENTIFIERS, LAUNCH_ERROR_MESSAGES, MODELNEW_DOCS, PARAM_NAMES,
                    PY_BUILD_COMMENTS, SHORT, TYPE_ALIASES, camel, header_comment, spell)

# ---------------------------------------------------------------- element types

CTYPES = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "fp64": "double", "int64": "int64_t",
          "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
SCALAR_TYPES = {
    "fp32": ["at::kFloat", "torch::kFloat32", "at::ScalarType::Float", "torch::kFloat"],
    "fp16": ["at::kHalf", "torch::kFloat16", "at::ScalarType::Half", "torch::kHalf"],
    "bf16": ["at::kBFloat16", "torch::kBFloat16", "at::ScalarType::BFloat16"],
    "fp64": ["at::kDouble", "torch::kFloat64"],
    "int64": ["at::kLong", "torch::kInt64", "at::ScalarType::Long"],
    "int32": ["at::kInt", "torch::kInt32", "at::ScalarType::Int"],
    "int8": ["at::kChar", "torch::kInt8"], "uint8": ["at::kByte", "torch::kUInt8"],
    "bool": ["at::kBool", "torch::kBool"],
}
DTYPE_WORDS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64", "int64": "int64",
               "int32": "int32", "int8": "int8", "uint8": "uint8", "bool": "bool"}
HALF_HEADERS = {"fp16": "#include <cuda_fp16.h>", "bf16": "#include <cuda_bf16.h>"}
TO_FLOAT = {"fp16": "__half2float", "bf16": "__bfloat162float"}
FROM_FLOAT = {"fp16": "__float2half", "bf16": "__float2bfloat16"}
DISPATCH = {"fp32": ["AT_DISPATCH_FLOATING_TYPES({t}, {name}, [&] {{"],
            "fp16": ["AT_DISPATCH_FLOATING_TYPES_AND_HALF({t}, {name}, [&] {{",
                     "AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, {t}, {name}, [&] {{"],
            "bf16": ["AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, {t}, {name}, [&] {{",
                     "AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, {t}, {name}, [&] {{"]}

# Which dtype modes a template supports: "all" (kernels templatable, no file-scope use of elem_t) or "alias".
MODES_ALL = ("alias", "typedef", "plain", "template", "dispatch")
MODES_ALIAS = ("alias", "typedef", "plain")


@dataclass
class Prelude:
    """What the CUDA source needs before the template body: element type, reduction helpers, extra headers."""

    dtype: str = "fp32"
    reductions: str | None = None  # None | warp_shuffle | smem_tree | cub
    block_threads: int | None = None  # cub: the block size every reducing kernel launches with
    headers: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES_ALIAS  # dtype modes the template's kernels allow
    float_only: bool = False  # the kernels use `float` directly (no elem_t): no element-type prelude


# ---------------------------------------------------------------- the style

@dataclass
class CodeStyle:
    naming: str
    comments: str
    header: str
    checks: str
    launch_check: str
    grid: str
    dtype_mode: str
    stream: str
    signature: str
    tensor_type: str
    pointer: str
    binding: str
    cuda_flags: list[str] | None
    cxx_flags: list[str] | None
    ldflags: bool
    verbose: bool | None
    as_lists: tuple[bool, bool]
    py_import: str
    nn_import: str
    ext_var: str
    cuda_var: str
    cpp_var: str
    host_scheme: str
    kernel_scheme: str
    model_doc: bool
    build_comment: bool
    forward_form: str
    macro_names: dict[str, str]
    scalar_spelling: int
    rng: random.Random = field(repr=False, default_factory=random.Random)
    needs: set[str] = field(default_factory=set)  # helper definitions the resolved source uses
    tag_extra: dict = field(default_factory=dict)

    @property
    def tag(self) -> dict:
        return {"naming": self.naming, "comments": self.comments, "checks": self.checks,
                "launch_check": self.launch_check, "grid": self.grid, "dtype_mode": self.dtype_mode,
                "binding": self.binding, **self.tag_extra}


def draw_code_style(rng: random.Random, dtype: str, modes: tuple[str, ...]) -> CodeStyle:
    """A code style for one pair. `modes` are the dtype modes the template allows."""
    r = random.Random(rng.random())
    # AT_DISPATCH puts c10 types into device code, which the validator cannot compile on its fast path (the whole
    # torch header set goes through nvcc): common enough to learn from, rare enough to keep builds fast
    mode_weights = {"alias": 3, "typedef": 1, "plain": 2, "template": 1.5, "dispatch": 0.6}
    allowed = [m for m in modes if m != "dispatch" or dtype in DISPATCH]
    dtype_mode = r.choices(allowed, [mode_weights[m] for m in allowed])[0]
    naming = r.choices(["snake", "camel", "short"], [5, 4, 1.5])[0]
    binding = r.choices(["functions", "pybind"], [3, 1])[0]
    cuda_flags = r.choice([["-O3"], ["-O3"], ["-O3", "--expt-relaxed-constexpr"], ["-O3 -lineinfo"], ["-O2"],
                           ["-O3", "-std=c++17"], None, ["-O3", "-Xptxas", "-O3"]])
    macro_names = {"cuda": r.choice(["CHECK_CUDA", "CHECK_IS_CUDA", "ASSERT_CUDA", "ENSURE_CUDA"]),
                   "contig": r.choice(["CHECK_CONTIGUOUS", "CHECK_CONTIG", "ASSERT_CONTIGUOUS"]),
                   "input": r.choice(["CHECK_INPUT", "CHECK_TENSOR", "VALIDATE_INPUT", "CHECK_ARG"]),
                   "dtype": r.choice(["CHECK_DTYPE", "CHECK_TYPE", "ASSERT_DTYPE"]),
                   "launch": r.choice(["CUDA_CHECK_LAST", "CHECK_LAUNCH", "CUDA_KERNEL_CHECK", "KERNEL_CHECK"]),
                   "helper": r.choice(["check_input", "check_tensor", "validate", "expect_cuda_tensor",
                                       "check_arg"])}
    return CodeStyle(
        naming=naming,
        comments=r.choices(["none", "terse", "explain"], [2, 3, 4])[0],
        header=r.choice(["line", "block", "doxygen"]),
        checks=r.choices(["inline", "combined", "macros", "helper", "minimal"], [3, 2, 3, 2, 1])[0],
        launch_check=r.choices(["c10", "last_error", "macro", "none"], [4, 2, 2, 1.5])[0],
        grid=r.choice(["minmax", "cdiv", "ceil_div", "expr"]),
        dtype_mode=dtype_mode,
        stream=r.choices(["c10", "c10_raw"], [3, 1])[0],
        signature=r.choices(["value", "cref"], [3, 2])[0],
        tensor_type=r.choices(["torch", "at"], [5, 1])[0],
        pointer=r.choice(["data_ptr", "reinterpret", "static_cast"]),
        binding=binding,
        cuda_flags=cuda_flags,
        cxx_flags=r.choice([None, None, ["-O3"], ["-O2"], ["-std=c++17"]]),
        ldflags=r.random() < 0.2,
        verbose=r.choice([None, False, False, True]),
        as_lists=(r.random() < 0.25, r.random() < 0.25),
        py_import=r.choices(["from", "module", "package"], [5, 1, 1])[0],
        nn_import=r.choice(["nn", "from_torch"]),
        ext_var=r.choice(["{stem}_ext", "_ext", "ext", "kernels", "cuda_module", "fused_ops", "{stem}_module",
                          "cuda_ext", "native_ops", "_kernels"]),
        cuda_var=r.choice(["{stem}_cuda_source", "cuda_source", "cuda_src", "kernel_source", "CUDA_SRC", "{stem}_src",
                           "cuda_code", "KERNEL_CODE", "{stem}_kernel_code", "source_cu"]),
        cpp_var=r.choice(["{stem}_cpp_source", "cpp_source", "cpp_src", "CPP_SRC", "cpp_decl", "cpp_header",
                          "{stem}_decl", "cpp_code", "CPP_DECLS"]),
        host_scheme=r.choice(["{s}", "{s}_cuda", "{s}_forward", "run_{s}", "launch_{s}", "{s}_fwd", "fused_{s}",
                              "{s}_op", "my_{s}"]),
        kernel_scheme=r.choice(["{s}_{suffix}", "{s}_{suffix}", "{s}_{suffix}_impl", "{suffix}_{s}",
                                "cuda_{s}_{suffix}", "fused_{s}_{suffix}"]),
        model_doc=r.random() < 0.55,
        build_comment=r.random() < 0.5,
        forward_form=r.choice(["return", "return", "assign"]),
        macro_names=macro_names,
        scalar_spelling=r.randrange(4),
        rng=r,
    )


# ---------------------------------------------------------------- rendering a CUDA source in a style

_MARKER = re.compile(r"@@(\w+)((?:\|[^@|]*)*)@@")


def style_cuda_source(body: str, prelude: Prelude, style: CodeStyle, stem: str, op_doc: str, strategy: str
                      ) -> tuple[str, str]:
    """(the CUDA source, the host function's name) of a template body in `style`."""
    style.needs = set()
    if style.dtype_mode in ("template", "dispatch") and prelude.float_only:
        style.dtype_mode = "alias"
    text = body
    if not prelude.float_only:
        text = _apply_dtype_mode(text, prelude, style)
    text = _MARKER.sub(lambda m: _resolve(m.group(1), m.group(2)[1:].split("|") if m.group(2) else [], style,
                                          prelude), text)
    text = re.sub(r"^[ \t]*@@REMOVE_LINE@@[ \t]*\n", "", text, flags=re.M)
    head = _includes(prelude, style) + _support_code(prelude, style)
    source = head + "\n" + text.strip("\n") + "\n"
    source = _signatures(source, stem, style)
    source = _comments(source, style, op_doc, strategy, prelude.dtype)
    host = _host_name(stem, style)
    source = _rename_stem(source, stem, host, style)
    source = rename_identifiers(source, style)
    return source, host


def _resolve(kind: str, args: list[str], style: CodeStyle, prelude: Prelude) -> str:
    if kind == "CHECKS":
        return _checks(args[0], args[1].split(","), args[2], style)
    if kind == "PTR":
        return _pointer(args[0], args[1] == "c", style, prelude.dtype)
    if kind == "GRID":
        work, threads, cap = args[0], int(args[1]), int(args[2]) if len(args) > 2 and args[2] else 65535
        return _grid(work, threads, cap, style)
    if kind == "CDIV":
        return _cdiv(args[0], args[1], style)
    if kind == "STREAM":  # (ATen/cuda/CUDAContext.h would pull in the cuBLAS/cuSPARSE headers)
        if style.stream == "c10_raw":
            return "c10::cuda::getCurrentCUDAStream().stream()"
        return "c10::cuda::getCurrentCUDAStream()"
    if kind == "LAUNCH_CHECK":
        return _launch_check(style)
    if kind == "DTYPE":  # the scalar type constant of a dtype, e.g. in a dtype check written by the template
        return _scalar(args[0], style)
    raise ValueError(f"unknown marker {kind}")


def _scalar(dtype: str, style: CodeStyle) -> str:
    options = SCALAR_TYPES[dtype]
    return options[style.scalar_spelling % len(options)]


def _message(kind: str, style: CodeStyle, dtype: str = "") -> str:
    return style.rng.choice(CHECK_MESSAGES[kind]).format(dtype=DTYPE_WORDS.get(dtype, dtype))


def _checks(fn: str, tensors: list[str], dtype: str, style: CodeStyle) -> str:
    """Device/contiguity/dtype checks of the tensors a host function receives, in the style's form."""
    check_dtype = not (style.dtype_mode == "dispatch" and dtype in DISPATCH)
    scalar = _scalar(dtype, style)
    lines = []
    for t in tensors:
        if style.checks == "inline":
            lines.append(f'    TORCH_CHECK({t}.is_cuda(), "{fn}: {t} {_message("cuda", style)}");')
            lines.append(f'    TORCH_CHECK({t}.is_contiguous(), "{fn}: {t} {_message("contiguous", style)}");')
            if check_dtype:
                lines.append(f'    TORCH_CHECK({t}.scalar_type() == {scalar}, "{fn}: {t} {_message("dtype", style, dtype)}");')
        elif style.checks == "combined":
            cond = f"{t}.is_cuda() && {t}.is_contiguous()" + (f" && {t}.scalar_type() == {scalar}" if check_dtype else "")
            what = f"a contiguous CUDA {DTYPE_WORDS[dtype]} tensor" if check_dtype else "a contiguous CUDA tensor"
            lines.append(f'    TORCH_CHECK({cond}, "{fn}: {t} must be {what}");')
        elif style.checks == "macros":
            style.needs.add("macros")
            lines.append(f"    {style.macro_names['input']}({t});")
            if check_dtype:
                style.needs.add("dtype_macro")
                lines.append(f"    {style.macro_names['dtype']}({t}, {scalar});")
        elif style.checks == "helper":
            style.needs.add("helper")
            lines.append(f'    {style.macro_names["helper"]}({t}, {scalar if check_dtype else "std::nullopt"}, "{t}");')
        else:  # minimal: device only (contiguity and dtype come from the Python side)
            lines.append(f'    TORCH_CHECK({t}.is_cuda(), "{t} {_message("cuda", style)}");')
    return "\n".join(lines).lstrip()


def _pointer(name: str, const: bool, style: CodeStyle, dtype: str) -> str:
    q = "const " if const else ""
    if style.dtype_mode == "dispatch":
        return f"{name}.data_ptr<scalar_t>()"
    ctype = CTYPES[dtype] if style.dtype_mode in ("template", "plain") else "elem_t"
    if dtype == "fp32" and style.pointer == "data_ptr":
        return f"{name}.data_ptr<float>()"
    if style.pointer == "static_cast":
        return f"static_cast<{q}{ctype}*>({name}.data_ptr())"
    return f"reinterpret_cast<{q}{ctype}*>({name}.data_ptr())"


def _grid(work: str, threads: int, cap: int, style: CodeStyle) -> str:
    blocks = _cdiv(work, str(threads), style)
    return f"(int)std::min<int64_t>({blocks}, {cap})"


def _cdiv(a: str, b: str, style: CodeStyle) -> str:
    if style.grid == "cdiv":
        style.needs.add("cdiv")
        return f"cdiv({a}, (int64_t){b})"
    if style.grid == "ceil_div":
        style.needs.add("ceil_div")
        return f"at::ceil_div<int64_t>({a}, {b})"
    if style.grid == "expr" and b.isdigit():
        return f"({a} + {int(b) - 1}) / {b}"
    b = b if b.isdigit() else f"({b})"
    return f"({a} + {b} - 1) / {b}"


def _launch_check(style: CodeStyle) -> str:
    if style.launch_check == "c10":
        return "C10_CUDA_KERNEL_LAUNCH_CHECK();"
    if style.launch_check == "last_error":
        return f'TORCH_CHECK(cudaGetLastError() == cudaSuccess, "{style.rng.choice(LAUNCH_ERROR_MESSAGES)}");'
    if style.launch_check == "macro":
        style.needs.add("launch_macro")
        return f"{style.macro_names['launch']}();"
    return "@@REMOVE_LINE@@"


def _includes(prelude: Prelude, style: CodeStyle) -> str:
    lines = ["#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>"]
    if style.launch_check == "c10":
        lines.append("#include <c10/cuda/CUDAException.h>")
    if "ceil_div" in style.needs:
        lines.append("#include <ATen/ceil_div.h>")
    if prelude.dtype in HALF_HEADERS:
        lines.append(HALF_HEADERS[prelude.dtype])
    if prelude.reductions == "cub":
        lines.append("#include <cub/block/block_reduce.cuh>")
    lines += [f"#include {h}" for h in prelude.headers]
    if style.rng.random() < 0.3:
        lines.append(style.rng.choice(["#include <cuda_runtime.h>", "#include <cstdint>", "#include <cmath>"]))
    first, rest = lines[:1], lines[1:]
    if style.rng.random() < 0.4:
        style.rng.shuffle(rest)
    return "\n".join(first + rest) + "\n"


def _support_code(prelude: Prelude, style: CodeStyle) -> str:
    """Macros and helpers the resolved source uses, then the element type and conversion helpers."""
    parts = []
    m = style.macro_names
    if "macros" in style.needs:
        parts.append(f'#define {m["cuda"]}(x) TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor")\n'
                     f'#define {m["contig"]}(x) TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")\n'
                     f'#define {m["input"]}(x) {m["cuda"]}(x); {m["contig"]}(x)\n')
    if "dtype_macro" in style.needs:
        parts.append(f'#define {m["dtype"]}(x, t) TORCH_CHECK((x).scalar_type() == (t), #x " has the wrong dtype")\n')
    if "launch_macro" in style.needs:
        parts.append(f"#define {m['launch']}() do {{ \\\n"
                     "        cudaError_t err_ = cudaGetLastError(); \\\n"
                     '        TORCH_CHECK(err_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(err_)); \\\n'
                     "    } while (0)\n")
    if "helper" in style.needs:
        parts.append(f"static void {m['helper']}(const torch::Tensor& t, std::optional<at::ScalarType> dtype, "
                     "const char* what) {\n"
                     '    TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");\n'
                     '    TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");\n'
                     '    if (dtype) TORCH_CHECK(t.scalar_type() == *dtype, what, " has dtype ", t.scalar_type(), '
                     '", expected ", *dtype);\n}\n')
    if "cdiv" in style.needs:
        parts.append("static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }\n")
    if not prelude.float_only:
        parts.append(_element_prelude(prelude.dtype, style))
    if prelude.reductions:
        parts.append(reduction_helpers(prelude.reductions, prelude.block_threads))
    return "\n".join(p for p in parts if p)


def _element_prelude(dtype: str, style: CodeStyle) -> str:
    ctype = CTYPES[dtype]
    half = dtype in TO_FLOAT
    if style.dtype_mode == "plain":
        return ""
    if style.dtype_mode in ("alias", "typedef"):
        alias = f"using elem_t = {ctype};" if style.dtype_mode == "alias" else f"typedef {ctype} elem_t;"
        to_f = f"{TO_FLOAT[dtype]}(v)" if half else "v"
        from_f = f"{FROM_FLOAT[dtype]}(v)" if half else "v"
        return (f"{alias}\n\n"
                f"__device__ __forceinline__ float load_f(elem_t v) {{ return {to_f}; }}\n"
                f"__device__ __forceinline__ elem_t store_f(float v) {{ return {from_f}; }}\n")
    if style.dtype_mode == "dispatch" or not half:
        return ("template <typename T>\n__device__ __forceinline__ float load_f(T v) { return static_cast<float>(v); }\n"
                "template <typename T>\n__device__ __forceinline__ T store_f(float v) { return static_cast<T>(v); }\n")
    return ("__device__ __forceinline__ float load_f(float v) { return v; }\n"
            f"__device__ __forceinline__ float load_f({ctype} v) {{ return {TO_FLOAT[dtype]}(v); }}\n"
            "template <typename T>\n__device__ __forceinline__ T store_f(float v);\n"
            "template <>\n__device__ __forceinline__ float store_f<float>(float v) { return v; }\n"
            f"template <>\n__device__ __forceinline__ {ctype} store_f<{ctype}>(float v) "
            f"{{ return {FROM_FLOAT[dtype]}(v); }}\n")


# ---------------------------------------------------------------- dtype modes

_KERNEL_START = re.compile(r"^(__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\()",
                           re.M)


def _apply_dtype_mode(text: str, prelude: Prelude, style: CodeStyle) -> str:
    mode = style.dtype_mode
    if mode == "plain":
        ctype = CTYPES[prelude.dtype]
        text = re.sub(r"\belem_t\b", ctype, text)
        if prelude.dtype in TO_FLOAT:
            text = re.sub(r"\bload_f\(", TO_FLOAT[prelude.dtype] + "(", text)
            return re.sub(r"\bstore_f\(", FROM_FLOAT[prelude.dtype] + "(", text)
        return _unwrap_calls(_unwrap_calls(text, "load_f"), "store_f")
    if mode not in ("template", "dispatch"):
        return text
    templated = []
    for match in list(_KERNEL_START.finditer(text)):
        end = _matching_brace(text, text.index("{", match.end()))
        if "elem_t" in text[match.start():end]:
            templated.append(match.group(2))
    for name in templated:
        start = re.search(rf"^__global__[^\n]*?\b{name}\s*\(", text, re.M).start()
        end = _matching_brace(text, text.index("{", start))
        kernel = re.sub(r"\bstore_f\(", "store_f<elem_t>(", text[start:end])
        text = text[:start] + "template <typename elem_t>\n" + kernel + text[end:]
    concrete = CTYPES[prelude.dtype]
    if mode == "template":
        for name in templated:
            text = re.sub(rf"\b{name}\s*<<<", f"{name}<{concrete}><<<", text)
        return text
    for name in templated:
        text = re.sub(rf"\b{name}\s*<<<", f"{name}<scalar_t><<<", text)
    return _wrap_dispatch(text, templated, prelude.dtype, style)


def _wrap_dispatch(text: str, kernels: list[str], dtype: str, style: CodeStyle) -> str:
    """Wrap every launch of a templated kernel (with the launch check after it) in AT_DISPATCH_*; the tensor whose
    type is dispatched on is the first PTR marker of the launch."""
    if not kernels:
        return text
    launch = re.compile(rf"^([ \t]*)(?:{'|'.join(kernels)})<scalar_t><<<", re.M)
    out, pos = [], 0
    for match in launch.finditer(text):
        if match.start() < pos:
            continue
        indent = match.group(1)
        end = _statement_end(text, match.end())
        nxt = re.match(r"[ \t]*@@LAUNCH_CHECK@@[ \t]*\n", text[end:])
        if nxt:
            end += nxt.end()
        statement = text[match.start():end]
        tensor = re.search(r"@@PTR\|(\w+)\|", statement)
        if tensor is None:
            continue
        opener = style.rng.choice(DISPATCH[dtype]).format(t=f"{tensor.group(1)}.scalar_type()",
                                                          name='"' + kernels[0] + '"')
        body = "".join(indent + "    " + line[len(indent):] if line.strip() else line
                       for line in statement.splitlines(keepends=True))
        out.append(text[pos:match.start()] + f"{indent}{opener}\n{body}{indent}}});\n")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _statement_end(text: str, start: int) -> int:
    """Index just past the `;` (and newline) ending the statement that starts before `start`."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ";" and depth <= 0:
            return i + 2 if text[i + 1:i + 2] == "\n" else i + 1
        i += 1
    return len(text)


def _matching_brace(text: str, open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced braces in a kernel template")


def _unwrap_calls(text: str, fn: str) -> str:
    """`fn(expr)` -> `expr` (or `(expr)` when expr is not a simple operand): conversions that are identities."""
    out, pos = [], 0
    pattern = re.compile(rf"\b{fn}\(")
    while True:
        match = pattern.search(text, pos)
        if match is None:
            out.append(text[pos:])
            return "".join(out)
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = text[match.end():i - 1]
        simple = re.fullmatch(r"[\w.\[\]]+(\s*\[[^\]]*\])*|[\w.]+\[[^\[\]]*\]", inner.strip()) is not None \
            or _is_call(inner.strip())
        out.append(text[pos:match.start()] + (inner if simple else f"({inner})"))
        pos = i


def _is_call(expr: str) -> bool:
    """`expr` is one call `name(...)` (its first `(` closes at the end)."""
    match = re.match(r"[\w.:]+(<[\w, ]*>)?\(", expr)
    if not match:
        return False
    depth = 0
    for k in range(match.end() - 1, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[k], 0)
        if depth == 0:
            return k == len(expr) - 1
    return False


# ---------------------------------------------------------------- signatures, comments, names

def _signatures(source: str, stem: str, style: CodeStyle) -> str:
    if style.signature == "cref":
        def cref(match: re.Match) -> str:
            return match.group(1) + re.sub(r"\btorch::Tensor\s+(\w+)", r"const torch::Tensor& \1", match.group(2))
        source = re.sub(rf"^(torch::Tensor\s+{stem}\s*\()([^)]*\))", cref, source, flags=re.M)
    if style.tensor_type == "at":
        source = re.sub(r"\btorch::Tensor\b", "at::Tensor", source)
    return source


def host_declaration(source: str, host: str) -> str:
    """The declaration of the host function `host` as defined in `source` (for cpp_sources)."""
    for match in _DEFINITION.finditer(source):
        if match.group(2) == host:
            depth, i = 1, match.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(source[i], 0)
                i += 1
            return " ".join(source[match.start():i].split()) + ";"
    raise ValueError(f"no definition of the host function {host}")


_DEFINITION = re.compile(r"^((?:torch|at)::Tensor|std::tuple<[^\n]*?>|std::vector<[^\n]*?>|void)\s+(\w+)\s*\(", re.M)


def _comments(source: str, style: CodeStyle, op_doc: str, strategy: str, dtype: str) -> str:
    if style.comments == "none":
        source = re.sub(r"/\*.*?\*/\n?", "", source, flags=re.S)
        source = re.sub(r"^[ \t]*//[^\n]*\n", "", source, flags=re.M)
        return re.sub(r"[ \t]+//[^\n\"]*$", "", source, flags=re.M)
    if style.comments == "terse":
        def shorten(match: re.Match) -> str:
            text = match.group(2)
            first = re.split(r"(?<=[.;:])\s|\s-\s|, so ", text)[0].rstrip(".;:")
            if len(first) > 72:
                first = first[:72].rsplit(" ", 1)[0]
            return f"{match.group(1)}// {first}"
        lines, out, previous_comment = source.splitlines(keepends=True), [], False
        for line in lines:
            is_comment = line.lstrip().startswith("//")
            if is_comment and previous_comment:
                continue  # keep the first line of a comment block
            out.append(re.sub(r"^([ \t]*)//\s*(.*)$", shorten, line) if is_comment else line)
            previous_comment = is_comment
        return "".join(out)
    # explanatory: a header describing the op and the approach, placed after the includes and macros
    header = header_comment(style.rng, op_doc, strategy, dtype, style.header)
    position = _after_preamble(source)
    return source[:position] + "\n" + header + source[position:]


def _after_preamble(source: str) -> int:
    """Offset just past the leading preprocessor lines (a directive continues over lines ending in a backslash)."""
    position, continued = 0, False
    for line in source.splitlines(keepends=True):
        if continued or line.startswith("#"):
            continued = line.rstrip("\n").endswith("\\")
            position += len(line)
        elif line.strip():
            break
        else:
            position += len(line)
    return position


def _host_name(stem: str, style: CodeStyle) -> str:
    return spell(style.host_scheme.format(s=stem), "camel" if style.naming == "camel" else "snake")


def _rename_stem(source: str, stem: str, host: str, style: CodeStyle) -> str:
    """`stem` -> the host name; `stem_suffix` (kernels, launchers) -> the style's kernel naming."""
    convention = "camel" if style.naming == "camel" else "snake"

    def name_of(match: re.Match) -> str:
        suffix = match.group(1)
        if not suffix:
            return host
        return spell(style.kernel_scheme.format(s=stem, suffix=suffix[1:]), convention)

    pattern = _STEM_PATTERNS.get(stem)
    if pattern is None:
        pattern = _STEM_PATTERNS[stem] = re.compile(rf"(?<![\w.]){re.escape(stem)}((?:_[A-Za-z0-9]+)*)\b")
    return pattern.sub(name_of, source)


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_STEM_PATTERNS: dict[str, re.Pattern] = {}  # one per stem, compiled once


def rename_identifiers(source: str, style: CodeStyle) -> str:
    """Rename the canonical template identifiers to the style's synonyms, so the program is the same one with other
    names. Struct members, names after `.`, `->` or `::`, comments, #include lines and any synonym already present in
    the source are left alone; in string literals only tensor parameter names change (error messages name them)."""
    present = set(_IDENTIFIER.findall(source))
    members = set()  # names declared as struct members (used after `.`, so they keep their names)
    for body in re.findall(r"struct\s+(?:alignas\(\d+\)\s+)?\w+\s*\{([^{}]*)\}", source):
        members.update(re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*;", body))
    mapping: dict[str, str] = {}
    taken = set(present) | CPP_RESERVED
    r = style.rng
    canon = ["elem_t"] + [c for c in IDENTIFIERS if c in present and c not in members]
    for name in canon:
        if name == "elem_t":
            if "elem_t" not in present:
                continue
            pool = list(TYPE_ALIASES["short" if style.naming == "short" else style.naming])
        elif style.naming == "short" and name in SHORT:
            pool = list(SHORT[name])
        else:
            pool = [spell(s, style.naming if style.naming != "short" else "snake") for s in IDENTIFIERS[name]]
        r.shuffle(pool)
        if r.random() < 0.3:
            pool.insert(0, name)  # keep the canonical name now and then
        for alias in pool:
            if alias == name or (alias not in taken and alias not in mapping.values()):
                mapping[name] = alias
                break
    mapping = {k: v for k, v in mapping.items() if k != v}
    if not mapping:
        return source
    in_strings = {k: v for k, v in mapping.items() if k in PARAM_NAMES}
    out = []
    for kind, text in _segments(source):
        if kind == "code":
            text = _CODE_NAME.sub(lambda m: mapping.get(m.group(1), m.group(1)), text)
        elif kind == "string" and in_strings:
            text = _STRING_NAME.sub(lambda m: in_strings.get(m.group(1), m.group(1)), text)
        out.append(text)
    return "".join(out)


# An identifier not reached through `.`, `->` or `::` (those name members or namespaces).
_CODE_NAME = re.compile(r"(?<![\w.>:])([A-Za-z_]\w*)")
_STRING_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


_SEGMENT = re.compile(r'(//[^\n]*|/\*.*?\*/)|("(?:\\.|[^"\\\n])*")|(^[ \t]*#[ \t]*include[^\n]*)', re.S | re.M)


def _segments(source: str):
    """(kind, text) pieces of C++ source: code, string literals, comments and #include lines."""
    pos = 0
    for match in _SEGMENT.finditer(source):
        if match.start() > pos:
            yield "code", source[pos:match.start()]
        yield ("comment" if match.group(1) else "string" if match.group(2) else "include"), match.group(0)
        pos = match.end()
    if pos < len(source):
        yield "code", source[pos:]


# ---------------------------------------------------------------- the ModelNew file

def render_candidate_file(cuda_source: str, host: str, stem: str, style: CodeStyle, init_sig: str, init_body: str,
                          forward_sig: str, forward_body: str, op_doc: str) -> str:
    """The candidate module: the CUDA source string, the C++ declarations, load_inline, and ModelNew."""
    convention = "camel" if style.naming == "camel" else "snake"
    names = {"stem": stem}
    cuda_var = _py_name(style.cuda_var.format(**names), convention)
    cpp_var = _py_name(style.cpp_var.format(**names), convention)
    ext_var = _py_name(style.ext_var.format(**names), convention)
    if len({cuda_var, cpp_var, ext_var}) < 3:
        cuda_var, cpp_var, ext_var = f"{stem}_cuda_source", f"{stem}_cpp_source", f"{stem}_ext"
    declaration = host_declaration(cuda_source, host)
    digest = hashlib.sha256(cuda_source.encode()).hexdigest()[:10]
    if style.binding == "pybind":
        doc = style.rng.choice(["", op_doc[:60]]).replace('"', "'")
        cpp = (f'{cpp_var} = """\n{declaration}\n\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n'
               f'    m.def("{host}", &{host}, "{doc}");\n}}\n"""\n\n')
    else:
        cpp = f'{cpp_var} = "{declaration}"\n\n'
    loader = {"from": "load_inline", "module": "cpp_extension.load_inline", "package": "cpp_ext.load_inline"}[style.py_import]
    imports = ["import torch\n", "import torch.nn as nn\n" if style.nn_import == "nn" else "from torch import nn\n",
               {"from": "from torch.utils.cpp_extension import load_inline\n",
                "module": "from torch.utils import cpp_extension\n",
                "package": "import torch.utils.cpp_extension as cpp_ext\n"}[style.py_import]]
    as_cpp, as_cuda = style.as_lists
    args = [f'    name="{host}_{digest}",',
            f"    cpp_sources={'[' + cpp_var + ']' if as_cpp else cpp_var},",
            f"    cuda_sources={'[' + cuda_var + ']' if as_cuda else cuda_var},"]
    if style.binding == "functions":
        args.append(f'    functions=["{host}"],')
    if style.cuda_flags is not None:
        args.append(f"    extra_cuda_cflags={style.cuda_flags!r},".replace("'", '"'))
    if style.cxx_flags is not None:
        args.append(f"    extra_cflags={style.cxx_flags!r},".replace("'", '"'))
    if style.ldflags:
        args.append("    extra_ldflags=[],")
    if style.verbose is not None:
        args.append(f"    verbose={style.verbose},")
    parts = imports + ["\n", f'{cuda_var} = r"""\n{cuda_source}"""\n\n', cpp]
    if style.build_comment:
        parts.append(style.rng.choice(PY_BUILD_COMMENTS) + "\n")
    parts += [f"{ext_var} = {loader}(\n", "\n".join(args) + "\n", ")\n\n\n", "class ModelNew(nn.Module):\n"]
    if style.model_doc:
        parts.append(f'    """{style.rng.choice(MODELNEW_DOCS).format(op=op_doc)}"""\n\n')
    parts += [f"    def {init_sig}:\n", "        super().__init__()\n"]
    if init_body.strip():
        parts.append(_indent(init_body, 8) + "\n")
    body = re.sub(rf"\b_ext_\.{re.escape(stem)}\b", f"{ext_var}.{host}", forward_body)
    if style.forward_form == "assign" and body.strip().startswith("return ") and "\n" not in body.strip():
        body = "out = " + body.strip()[len("return "):] + "\nreturn out"
    parts += ["\n", f"    def {forward_sig}:\n", _indent(body, 8) + "\n"]
    return "".join(parts)


def _py_name(name: str, convention: str) -> str:
    return name if name.isupper() else spell(name, convention)


def _indent(code: str, spaces: int) -> str:
    import textwrap
    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)


# ---------------------------------------------------------------- block reductions (a strategy, chosen per pair)

WARP_HELPERS = """
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ __forceinline__ float warp_min(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}
"""

_SHUFFLE_BLOCK = """
// Block-wide {what}: every thread of the block calls it and gets the result.
__device__ __forceinline__ float block_{what}(float v) {{
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_{what}(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : {identity};
    if (warp == 0) v = warp_{what}(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}}
"""

_TREE_BLOCK = """
// Block-wide {what} through a shared-memory tree (blockDim.x must be a power of two, at most 1024).
__device__ __forceinline__ float block_{what}(float v) {{
    __shared__ float partial[1024];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {{
        if (threadIdx.x < s) partial[threadIdx.x] = {combine};
        __syncthreads();
    }}
    const float r = partial[0];
    __syncthreads();
    return r;
}}
"""

_CUB_BLOCK = """
// Block-wide {what} with cub::BlockReduce (the kernels calling it launch exactly BLOCK_THREADS threads).
__device__ __forceinline__ float block_{what}(float v) {{
    __shared__ typename BlockReduceF::TempStorage storage;
    __shared__ float result;
    const float r = BlockReduceF(storage).{call};
    if (threadIdx.x == 0) result = r;
    __syncthreads();
    const float out = result;
    __syncthreads();
    return out;
}}
"""

_IDENTITY = {"sum": "0.f", "max": "-INFINITY", "min": "INFINITY"}
_TREE_COMBINE = {"sum": "partial[threadIdx.x] + partial[threadIdx.x + s]",
                 "max": "fmaxf(partial[threadIdx.x], partial[threadIdx.x + s])",
                 "min": "fminf(partial[threadIdx.x], partial[threadIdx.x + s])"}


def reduction_helpers(flavour: str, block_threads: int | None) -> str:
    """warp_sum/max/min, and block_sum/max/min in one of three flavours (same results up to summation order);
    `warp_only` for kernels that give each row a warp."""
    text = WARP_HELPERS
    if flavour == "warp_only":
        return text
    if flavour == "warp_shuffle":
        return text + "".join(_SHUFFLE_BLOCK.format(what=w, identity=_IDENTITY[w]) for w in ("sum", "max", "min"))
    if flavour == "smem_tree":
        return text + "".join(_TREE_BLOCK.format(what=w, combine=_TREE_COMBINE[w]) for w in ("sum", "max", "min"))
    if flavour == "cub":
        if not block_threads:
            raise ValueError("the cub flavour needs the block size the reducing kernels launch with")
        return (text + f"\nconstexpr int BLOCK_THREADS = {block_threads};\n"
                "using BlockReduceF = cub::BlockReduce<float, BLOCK_THREADS>;\n"
                "struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };\n"
                "struct MinOp { __device__ float operator()(float a, float b) const { return fminf(a, b); } };\n"
                + _CUB_BLOCK.format(what="sum", call="Sum(v)")
                + _CUB_BLOCK.format(what="max", call="Reduce(v, MaxOp())")
                + _CUB_BLOCK.format(what="min", call="Reduce(v, MinOp())"))
    raise ValueError(f"unknown reduction flavour {flavour}")
