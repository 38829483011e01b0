"""Splits a load_inline CUDA source into a torch-free kernels file (fast for nvcc) and a host file (torch glue for
g++ with a precompiled header); `<<<...>>>` launches in host code become calls to generated launcher functions.

Any construct the split cannot handle safely raises SplitError and the caller compiles the source unsplit."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .problem import SourceSegment

_TORCH_WORDS = re.compile(r"\b(torch|at|c10|pybind11|py|AT_DISPATCH\w*|TORCH_\w+|C10_\w+)\b")
_HOST_ONLY_INCLUDE = re.compile(r'#\s*include\s*[<"](torch/|ATen/|c10/|pybind11/|Python\.h)')
_DEVICE_WORDS = re.compile(r"\b(__global__|__device__|__constant__|__shared__|__managed__)\b")
_KERNEL_DEF = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+)*void\s+"
                         r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
LAUNCH_PREFIX = "__dice_launch_"


class SplitError(Exception):
    """The source uses something the split cannot handle; compile it as one translation unit instead."""


@dataclass
class _Item:
    """A top-level piece of the source: a preprocessor line, a declaration or a definition."""

    text: str
    line: int  # 0-based line of the item start within the source
    origin: SourceSegment | None
    directive: bool = False


def split_host_device(chunks) -> tuple[list, list]:
    """chunks: compile._Chunk list of the user's CUDA sources -> (host chunks, device chunks)."""
    from .compile import _Chunk

    items: list[_Item] = []
    for chunk in chunks:
        items += _top_level_items(chunk.text, chunk.origin)
    kernels: dict[str, list[str]] = {}
    device_symbols: set[str] = set()
    for item in items:
        if item.directive:
            continue
        if _DEVICE_WORDS.search(_strip_comments_and_strings(item.text)):
            body = _strip_comments_and_strings(item.text)
            if _TORCH_WORDS.search(body):
                raise SplitError("device code uses torch/ATen types")
            if re.match(r"\s*(namespace|extern)\b", body):
                raise SplitError("device code inside a namespace or extern block")
            match = _KERNEL_DEF.search(body)
            if match:
                if re.match(r"\s*template\b", body):
                    raise SplitError(f"templated kernel {match.group(1)}")
                kernels.setdefault(match.group(1), []).append(_parameter_list(body, match.end() - 1))
            elif not re.search(r"\)\s*(const\s*)?\{", body):  # a __device__/__constant__ variable
                device_symbols.update(re.findall(r"(\w+)\s*(?:\[[^\]]*\])*\s*(?:=[^;]*)?;", body))

    host, device = [_Chunk("#include <cuda_runtime.h>")], [_Chunk("#include <cuda_runtime.h>")]
    for item in items:
        chunk = _Chunk(item.text, _shift(item.origin, item.line))
        if item.directive:
            if _HOST_ONLY_INCLUDE.search(item.text):
                host.append(chunk)
            else:
                host.append(chunk)
                device.append(chunk)
            continue
        body = _strip_comments_and_strings(item.text)
        if _DEVICE_WORDS.search(body):
            device.append(chunk)
            match = _KERNEL_DEF.search(body)
            if match:
                device.append(_Chunk(_launcher_definition(match.group(1), kernels[match.group(1)][-1])))
                host.append(_Chunk(_launcher_declaration(match.group(1), kernels[match.group(1)][-1])))
            continue
        if device_symbols & set(re.findall(r"\w+", body)):
            raise SplitError("host code uses a __device__/__constant__ symbol")
        is_function = re.search(r"\)\s*(const\s*)?(noexcept\s*)?\{", body) is not None
        if is_function or _TORCH_WORDS.search(body):
            host.append(_Chunk(_rewrite_launches(item.text, kernels), chunk.origin))
        else:
            host.append(chunk)
            device.append(chunk)
    if not kernels:
        raise SplitError("no __global__ kernel found")
    return host, device


def _shift(origin: SourceSegment | None, lines: int) -> SourceSegment | None:
    if origin is None or origin.file_line is None:
        return origin
    return SourceSegment("", origin.file_line + lines, origin.file)


def _strip_comments_and_strings(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def _top_level_items(text: str, origin: SourceSegment | None) -> list[_Item]:
    """Cut the source at depth-0 `;`/`}` and around preprocessor lines, keeping every character (so line numbers
    inside items are preserved)."""
    items, start, depth, i, n = [], 0, 0, 0, len(text)
    line_of = lambda pos: text.count("\n", 0, pos)

    def flush(end):
        nonlocal start
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip("\n"))
            items.append(_Item(piece[lead:], line_of(start + lead), origin))
        start = end

    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#" and depth == 0 and text[start:i].strip() == "":
            flush(i)
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            piece = text[start:k]
            items.append(_Item(piece, line_of(start), origin, directive=True))
            start = i = k
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise SplitError("unbalanced braces")
            if depth == 0:
                j = i + 1
                while j < n and text[j] in " \t":
                    j += 1
                if j < n and text[j] == ";":
                    i = j
                flush(i + 1)
        elif c == ";" and depth == 0:
            flush(i + 1)
        i += 1
    if depth != 0:
        raise SplitError("unbalanced braces")
    flush(n)
    return items


def _parameter_list(body: str, open_paren: int) -> str:
    depth = 0
    for j in range(open_paren, len(body)):
        if body[j] == "(":
            depth += 1
        elif body[j] == ")":
            depth -= 1
            if depth == 0:
                return body[open_paren + 1: j]
    raise SplitError("kernel parameter list not closed")


def _split_top_commas(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:j])
            start = j + 1
    tail = text[start:]
    if tail.strip():
        parts.append(tail)
    return parts


def _named_parameters(params: str) -> tuple[list[str], list[str]]:
    """'const float* __restrict__ a, int n' -> (declarations with names, names); unnamed get p0, p1..."""
    decls, names = [], []
    if params.strip() in ("", "void"):
        return decls, names
    for k, param in enumerate(_split_top_commas(params)):
        param = param.split("=")[0].strip()
        param = re.sub(r"\s+", " ", param)
        match = re.search(r"(\w+)\s*(\[[^\]]*\])*$", param)
        type_words = {"int", "float", "double", "char", "bool", "long", "short", "unsigned", "signed", "size_t",
                      "const", "half", "__half", "__nv_bfloat16"}
        if match and match.group(1) not in type_words and not param.endswith(("*", "&")) and " " in param.strip():
            name = match.group(1)
            decls.append(param)
        else:
            name = f"p{k}"
            decls.append(f"{param} {name}")
        names.append(name)
    return decls, names


def _launcher_definition(kernel: str, params: str) -> str:
    decls, names = _named_parameters(params)
    all_params = ", ".join(["dim3 grid", "dim3 block", "size_t smem", "cudaStream_t stream", *decls])
    return (f"void {LAUNCH_PREFIX}{kernel}({all_params}) {{ {kernel}<<<grid, block, smem, stream>>>"
            f"({', '.join(names)}); }}")


def _launcher_declaration(kernel: str, params: str) -> str:
    decls, _ = _named_parameters(params)
    all_params = ", ".join(["dim3 grid", "dim3 block", "size_t smem", "cudaStream_t stream", *decls])
    return f"void {LAUNCH_PREFIX}{kernel}({all_params});"


_LAUNCH = re.compile(r"\b(\w+)\s*(<[^<>;]*>)?\s*<<<")


def _rewrite_launches(text: str, kernels: dict[str, list[str]]) -> str:
    """`k<<<g, b, s, st>>>(args)` -> `__dice_launch_k(g, b, s, st, args)`, keeping the line count unchanged."""
    out, pos = [], 0
    for match in _LAUNCH.finditer(text):
        if match.start() < pos:
            continue
        name = match.group(1)
        if name not in kernels or match.group(2):
            raise SplitError(f"launch of {name} is not a plain launch of a kernel defined here")
        end_config = text.find(">>>", match.end())
        if end_config < 0:
            raise SplitError("unterminated <<< >>>")
        config = _split_top_commas(text[match.end():end_config])
        if not 2 <= len(config) <= 4:
            raise SplitError("launch configuration needs 2-4 values")
        config += ["0"] * (4 - len(config))
        paren = text.find("(", end_config + 3)
        if paren < 0 or text[end_config + 3: paren].strip():
            raise SplitError("launch without an argument list")
        args_end = _matching_paren(text, paren)
        args = text[paren + 1: args_end]
        newlines = text.count("\n", match.start(), paren)
        grid, block, smem, stream = (c.strip() for c in config)
        call_args = [f"dim3({grid})", f"dim3({block})", f"(size_t)({smem})", f"(cudaStream_t)({stream})"]
        if args.strip():
            call_args.append(args)
        out.append(text[pos: match.start()])
        out.append(f"{LAUNCH_PREFIX}{name}(" + ", ".join(call_args) + ")" + "\n" * newlines)
        pos = args_end + 1
    out.append(text[pos:])
    return "".join(out)


def _matching_paren(text: str, open_index: int) -> int:
    depth = 0
    for j in range(open_index, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise SplitError("unbalanced parentheses in a kernel launch")
