"""Splits a load_inline CUDA source into a torch-free kernels file (device code only: nvcc -cubin) and a host file
(torch glue for g++ with a precompiled header). `<<<...>>>` launches in host code become calls to generated
launchers in the host file, which load the embedded cubin once with the CUDA runtime's library API and launch with
cudaLaunchKernel, the same entry point `<<<>>>` uses. Kernels get C linkage in the kernels file so the launchers find
them by their source name. A templated kernel becomes a __device__ function template, and each instantiation the
host code launches (`k<64, float><<<...>>>`) a C-linkage kernel that calls it, carrying the kernel's launch bounds.
A launch inside an `AT_DISPATCH_*` macro (`k<scalar_t><<<...>>>`) gets one instance kernel per type the macro
dispatches to, and a launcher template that picks the instance of its `scalar_t`.

Any construct the split cannot handle safely raises SplitError and the caller compiles the source unsplit."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .problem import SourceSegment

_TORCH_WORDS = re.compile(r"\b(torch|at|c10|pybind11|py|AT_DISPATCH\w*|TORCH_\w+|C10_\w+)\b")
_HOST_ONLY_INCLUDE = re.compile(r'#\s*include\s*[<"](torch/|ATen/|c10/|pybind11/|Python\.h)')
# Headers for device code only: g++ has no CUDA C++ (mma.h, cooperative groups) and, since CUDA 13, not even CCCL
# (CUB, Thrust, libcu++) on its include path; nvcc finds them all. Host code that names these libraries cannot be
# compiled by g++, so it is not split.
_DEVICE_ONLY_INCLUDE = re.compile(r'#\s*include\s*[<"](cub/|thrust/|cuda/|mma\.h|cooperative_groups|cuda_pipeline'
                                  r'|cuda_awbarrier|sm_\d+_intrinsics)')
_DEVICE_LIBRARIES = r"(?:nvcuda|wmma|cooperative_groups|cub|thrust|cuda)"
_DEVICE_LIBRARY_USE = re.compile(rf"(?<![:\w]){_DEVICE_LIBRARIES}::")
_DEVICE_NAMESPACE_DECLARATION = re.compile(rf"\s*(using\s+namespace|namespace\s+\w+\s*=)\s*(::)?{_DEVICE_LIBRARIES}\b")
_DEVICE_WORDS = re.compile(r"\b(__global__|__device__|__constant__|__shared__|__managed__)\b")
# A __global__ function's name, with or without __launch_bounds__ (before or after the return type) and qualifiers.
GLOBAL_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:[\w:<>,*&]+\s+)*?"
                           r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
_KERNEL_DEF = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+)*void\s+"
                         r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
# What load_inline's CUDA prelude (torch/types.h) brings into device code and the kernels file must bring itself:
# fixed-width integers and the C limits (INT64_MAX, FLT_MAX) always, at no measurable cost; the half and bfloat16
# types only where the source names them (their headers cost nvcc ~0.25 s a unit).
_DEVICE_PRELUDE = ("cuda_runtime.h", "cstdint", "climits", "cfloat")
_HALF_PRELUDE = ("cuda_fp16.h", "cuda_bf16.h")
_HALF_WORDS = re.compile(r"\b(half2?|__half\w*|__nv_bfloat\w*|nv_bfloat16\w*|__float2(half|bfloat16)\w*"
                         r"|__(half|bfloat16)2float\w*|__h(?!ost__)\w+)\b")
LAUNCH_PREFIX = "__dice_launch_"
# The cubin's bytes, defined (hidden) by the generated module file that the builder compiles after nvcc -cubin.
CUBIN_SYMBOL = "dice_kernels_cubin"


# AT_DISPATCH_* (ATen/Dispatch.h): the scalar types each macro dispatches to, and each type's C++ type, spelt so that
# host and device code name the same type (c10's half types are __host__ __device__; the kernels file then
# includes their headers).
_DISPATCH_MACRO = re.compile(r"\bAT_DISPATCH_(\w+)\s*\(")
_FLOATING = ("Double", "Float")
_INTEGRAL = ("Byte", "Char", "Int", "Long", "Short")
_DISPATCH_TYPES = {"FLOATING_TYPES": _FLOATING, "FLOATING_TYPES_AND_HALF": (*_FLOATING, "Half"),
                   "REDUCED_FLOATING_TYPES": ("Half", "BFloat16"), "INTEGRAL_TYPES": _INTEGRAL,
                   "ALL_TYPES": (*_INTEGRAL, *_FLOATING)}
# macro suffix -> (base, number of extra scalar types given before the tensor's type)
_DISPATCH_EXTRAS = {"FLOATING_TYPES_AND": ("FLOATING_TYPES", 1), "INTEGRAL_TYPES_AND": ("INTEGRAL_TYPES", 1),
                    "ALL_TYPES_AND": ("ALL_TYPES", 1),
                    **{f"FLOATING_TYPES_AND{n}": ("FLOATING_TYPES", n) for n in range(2, 6)},
                    **{f"ALL_TYPES_AND{n}": ("ALL_TYPES", n) for n in range(2, 4)}}
_CPP_TYPES = {"Double": "double", "Float": "float", "Half": "c10::Half", "BFloat16": "c10::BFloat16",
              "Byte": "uint8_t", "Char": "int8_t", "Short": "int16_t", "Int": "int32_t", "Long": "int64_t",
              "Bool": "bool"}
_C10_TYPE_HEADERS = {"c10::Half": "c10/util/Half.h", "c10::BFloat16": "c10/util/BFloat16.h"}
_SCALAR_TYPE = re.compile(r"\s*(?:(?:at|c10|torch)::)?(?:ScalarType::|k)(\w+)\s*")


class SplitError(Exception):
    """The source uses something the split cannot handle; compile it as one translation unit instead."""


@dataclass
class _Item:
    """A top-level piece of the source: a preprocessor line, a declaration or a definition."""

    text: str
    line: int  # 0-based line of the item start within the source
    origin: SourceSegment | None
    directive: bool = False


@dataclass
class _Template:
    """A templated kernel: its template parameters (name, default, whether a type) and its parameter list."""

    params: list[tuple[str, str | None, bool]]
    kernel_params: str
    launch_bounds: str | None
    instances: dict[str, str] = field(default_factory=dict)  # template arguments as written -> wrapper kernel
    # template arguments naming an AT_DISPATCH's scalar_t -> the launcher template and its instance per C++ type
    dispatched: dict[str, "_Dispatched"] = field(default_factory=dict)


@dataclass
class _Dispatched:
    """The instances of one `k<..scalar_t..>` launch pattern, one per type the enclosing dispatches cover."""

    launcher: str
    wrappers: dict[str, str] = field(default_factory=dict)  # C++ type -> wrapper kernel


@dataclass
class SplitSources:
    """The two generated units: host chunks (torch glue + launchers) and device chunks (kernels, C linkage)."""

    host: list
    device: list
    kernels: list[str] = field(default_factory=list)  # names in the cubin, in launcher index order
    # The kernels file includes c10 headers (the half types of a dispatch): nvcc needs torch's include path.
    needs_torch_includes: bool = False


def split_host_device(chunks) -> SplitSources:
    """chunks: compile._Chunk list of the user's CUDA sources -> host and device chunks."""
    from .compile import _Chunk

    items: list[_Item] = []
    for chunk in chunks:
        items += _top_level_items(chunk.text, chunk.origin)
    kernels: dict[str, str] = {}  # name -> parameter list
    templates: dict[str, _Template] = {}
    device_symbols: set[str] = set()
    device_only_names: set[str] = set()  # aliases of device-library types (`using BlockReduce = cub::...;`)
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
                if match.group(1) in kernels or match.group(1) in templates:
                    raise SplitError(f"kernel {match.group(1)} is declared more than once (a prototype or an "
                                     f"overload): C linkage for the cubin lookup needs exactly one definition")
                if not re.search(r"\)\s*\{", body[match.end() - 1:]):
                    raise SplitError(f"kernel {match.group(1)} is declared without a body here")
                if re.match(r"\s*template\b", body):
                    templates[match.group(1)] = _template_of(body, match)
                else:
                    kernels[match.group(1)] = _parameter_list(body, match.end() - 1)
            elif not re.search(r"\)\s*(const\s*)?\{", body):  # a __device__/__constant__ variable
                device_symbols.update(re.findall(r"(\w+)\s*(?:\[[^\]]*\])*\s*(?:=[^;]*)?;", body))

    # Instantiations first (the loader's table of names is written before the code that launches them).
    for item in items:
        if not item.directive and not _DEVICE_WORDS.search(_strip_comments_and_strings(item.text)):
            _collect_instances(_strip_comments_and_strings(item.text), templates, kernels)
    if not kernels:
        raise SplitError("no __global__ kernel found")
    names = list(kernels)
    all_kernels = set(kernels) | set(templates)
    host = [_Chunk("#include <cuda_runtime.h>")]
    code = _strip_comments_and_strings("\n".join(item.text for item in items if not item.directive))
    c10_headers = tuple(dict.fromkeys(_C10_TYPE_HEADERS[t] for template in templates.values()
                                      for group in template.dispatched.values() for t in group.wrappers
                                      if t in _C10_TYPE_HEADERS))
    headers = _DEVICE_PRELUDE + (_HALF_PRELUDE if _HALF_WORDS.search(code) else ()) + c10_headers
    device = [_Chunk("\n".join(f"#include <{h}>" for h in headers))]
    support = _Chunk(_launch_support(names))
    support_placed = False
    for item in items:
        chunk = _Chunk(item.text, _shift(item.origin, item.line))
        if not item.directive and not support_placed:
            # After the source's leading #includes, so they stay the unit's leading headers (the precompiled
            # header variant is chosen from them).
            host.append(support)
            support_placed = True
        if item.directive:
            if _HOST_ONLY_INCLUDE.search(item.text):
                host.append(chunk)
            elif _DEVICE_ONLY_INCLUDE.search(item.text):
                device.append(chunk)
            else:
                host.append(chunk)
                device.append(chunk)
            continue
        body = _strip_comments_and_strings(item.text)
        if _DEVICE_WORDS.search(body):
            match = _KERNEL_DEF.search(body)
            if match and match.group(1) in templates:
                template = templates[match.group(1)]
                device.append(_Chunk(_as_device_function(item.text, match.group(1)), chunk.origin))
                device += [_Chunk(_instance_kernel(match.group(1), template, args, wrapper))
                           for args, wrapper in template.instances.items()]
                device += [_Chunk(_instance_kernel(match.group(1), template, _with_scalar_type(args, cpp_type),
                                                   wrapper))
                           for args, group in template.dispatched.items()
                           for cpp_type, wrapper in group.wrappers.items()]
                host += [_Chunk(_launcher_definition(wrapper, kernels[wrapper], names.index(wrapper)))
                         for wrapper in template.instances.values()]
                host += [_Chunk(_dispatch_launcher_definition(
                             group, _substituted(template.kernel_params, template, args, match.group(1)), names))
                         for args, group in template.dispatched.items()]
            elif match:
                name = match.group(1)
                device.append(_Chunk(_with_c_linkage(item.text, name), chunk.origin))
                host.append(_Chunk(_launcher_definition(name, kernels[name], names.index(name))))
            else:
                device.append(chunk)
            continue
        words = set(re.findall(r"\w+", body))
        if device_symbols & words:
            raise SplitError("host code uses a __device__/__constant__ symbol")
        if device_only_names & words:
            raise SplitError(f"host code uses {sorted(device_only_names & words)[0]}, a name for device code")
        is_function = re.search(r"\)\s*(const\s*)?(noexcept\s*)?\{", body) is not None
        library = _DEVICE_LIBRARY_USE.search(body)
        if _DEVICE_NAMESPACE_DECLARATION.match(body) or (library and not is_function and not _TORCH_WORDS.search(body)):
            # `using namespace nvcuda;`, `using BlockReduce = cub::BlockReduce<float, 256>;`: for the device code
            device.append(chunk)
            alias = re.match(r"\s*using\s+(\w+)\s*=", body) or re.match(r"\s*typedef\b.*?(\w+)\s*;\s*$", body, re.S)
            if alias:
                device_only_names.add(alias.group(1))
            continue
        if library:
            raise SplitError(f"host code uses {library.group(0)}, a library g++ cannot compile")
        if is_function or _TORCH_WORDS.search(body):
            rewritten = _rewrite_launches(item.text, kernels, templates)
            other_uses = all_kernels & set(re.findall(r"\w+", _strip_comments_and_strings(rewritten)))
            if other_uses:
                # cudaFuncSetAttribute(k, ...), occupancy queries, taking k's address: need the real symbol.
                raise SplitError(f"host code uses kernel {sorted(other_uses)[0]} other than launching it")
            host.append(_Chunk(rewritten, chunk.origin))
        else:
            if all_kernels & words:
                raise SplitError(f"a declaration outside functions names kernel {sorted(all_kernels & words)[0]}")
            host.append(chunk)
            device.append(chunk)
    if not support_placed:
        host.append(support)
    return SplitSources(host, device, names, needs_torch_includes=bool(c10_headers))


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
    return body[open_paren + 1: _matching_paren(body, open_paren, "kernel parameter list not closed")]


def split_top_commas(text: str) -> list[str]:
    """The comma-separated parts of a parameter or argument list, commas inside brackets kept."""
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
    for k, param in enumerate(split_top_commas(params)):
        param = param.split("=")[0].strip()
        param = re.sub(r"\s+", " ", param)
        match = re.search(r"(\w+)\s*(\[[^\]]*\])*$", param)
        type_words = {"int", "float", "double", "char", "bool", "long", "short", "unsigned", "signed", "size_t",
                      "const", "half", "__half", "__nv_bfloat16"}
        # the last word names the parameter unless the parameter is a type alone ("unsigned int", "const half");
        # a type word after a whole type is a name (`int64_t half`)
        before = param[:match.start()].split() if match else []
        is_name = match and not param.endswith(("*", "&")) and before and match.group(1) not in _TYPE_MODIFIERS \
            and (match.group(1) not in type_words or before[-1] not in _TYPE_MODIFIERS)
        if is_name:
            name = match.group(1)
            decls.append(param)
        else:
            name = f"p{k}"
            decls.append(f"{param} {name}")
        names.append(name)
    return decls, names


_TYPE_MODIFIERS = {"const", "volatile", "unsigned", "signed", "long", "short", "struct"}
_KERNEL_QUALIFIERS = re.compile(r"\b(static|inline|__forceinline__)\b")


def _with_c_linkage(text: str, kernel: str) -> str:
    """The kernel definition with `extern "C"` in front (so the cubin symbol is the plain name) and storage/inline
    qualifiers blanked out (a linkage specification may not carry `static`; in a file of its own the kernel's
    linkage changes nothing else). Only the first line gets longer: line numbers stay the same."""
    head_end = re.search(rf"\b{re.escape(kernel)}\s*\(", text).start()
    head = _KERNEL_QUALIFIERS.sub(lambda m: " " * len(m.group(0)), text[:head_end])
    lead = len(text) - len(text.lstrip())
    return text[:lead] + 'extern "C" ' + head[lead:] + text[head_end:]


def _launch_support(kernels: list[str]) -> str:
    """Host-side loader shared by the launchers: the cubin is loaded once per process, on first launch, as a
    context-independent library (cudaLibraryLoadData), so every device's primary context - torch's - can run it."""
    names = ", ".join(f'"{k}"' for k in kernels)
    return f"""#include <stdexcept>
#include <string>
#include <type_traits>
#if !defined(CUDART_VERSION) || CUDART_VERSION < 12000
#error "the split build needs the CUDA 12+ runtime library API (cudaLibraryLoadData)"
#endif
extern "C" __attribute__((visibility("hidden"))) const unsigned char {CUBIN_SYMBOL}[];
namespace {{
cudaKernel_t __dice_kernel(int index) {{
    static const char* const names[] = {{{names}}};
    struct Table {{ cudaError_t status; cudaKernel_t kernels[{len(kernels)}]; }};
    static const Table table = [] {{
        Table t{{}};
        cudaLibrary_t library = nullptr;
        t.status = cudaLibraryLoadData(&library, {CUBIN_SYMBOL}, nullptr, nullptr, 0, nullptr, nullptr, 0);
        for (int i = 0; t.status == cudaSuccess && i < {len(kernels)}; ++i)
            t.status = cudaLibraryGetKernel(&t.kernels[i], library, names[i]);
        return t;
    }}();
    if (table.status != cudaSuccess) {{
        // <<<>>> would report a missing kernel image at the launch; here loading failed before any launch, so
        // the error is raised (a RuntimeError in Python) instead of being left for cudaGetLastError().
        (void)cudaGetLastError();
        throw std::runtime_error(std::string("loading the compiled CUDA kernels failed (kernel ") + names[index] +
                                 "): " + cudaGetErrorString(table.status));
    }}
    return table.kernels[index];
}}
void __dice_launch(int index, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, void** args) {{
    // cudaLaunchKernel is what <<<>>> compiles to: a failed launch is recorded for cudaGetLastError() and
    // cudaPeekAtLastError() exactly as before (the kernel handle is context-less, see cudaLibraryGetKernel).
    (void)cudaLaunchKernel((const void*)__dice_kernel(index), grid, block, args, smem, stream);
}}
}}  // namespace"""


def _launcher_definition(kernel: str, params: str, index: int | str, head: str = "", prologue: str = "") -> str:
    """A launcher whose parameters mirror the kernel's, so arguments convert as they would for `<<<>>>`; the
    argument array points at the launcher's own parameters. `index` is the kernel's place in the cubin's table
    (or an expression computed by `prologue`); `head` makes it a template."""
    decls, names = _named_parameters(params)
    all_params = ", ".join(["dim3 __dice_grid", "dim3 __dice_block", "size_t __dice_smem",
                            "cudaStream_t __dice_stream", *decls])
    args = ("void* __dice_args[] = {" + ", ".join(f"(void*)&{n}" for n in names) + "};") if names else \
        "void** __dice_args = nullptr;"
    return (f"{head}static inline void {LAUNCH_PREFIX}{kernel}({all_params}) {{ {prologue}{args} "
            f"__dice_launch({index}, __dice_grid, __dice_block, __dice_smem, __dice_stream, __dice_args); }}")


def _dispatch_launcher_definition(group: _Dispatched, params: str, names: list[str]) -> str:
    """A launcher template for the launches of one pattern inside AT_DISPATCH macros: its parameters are the
    kernel's with the dispatch's `scalar_t`, and it launches the instance kernel of that type."""
    index = "".join(f"std::is_same<scalar_t, {cpp_type}>::value ? {names.index(wrapper)} : "
                    for cpp_type, wrapper in group.wrappers.items()) + "-1"
    return _launcher_definition(group.launcher, params, "__dice_index", head="template <typename scalar_t> ",
                                prologue=f"constexpr int __dice_index = {index}; "
                                         f'static_assert(__dice_index >= 0, "a type the AT_DISPATCH does not list"); ')


_LAUNCH = re.compile(r"\b(\w+)\s*(<[^<>;]*>)?\s*<<<")


def _rewrite_launches(text: str, kernels: dict[str, str], templates: dict[str, _Template]) -> str:
    """`k<<<g, b, s, st>>>(args)` -> `__dice_launch_k(g, b, s, st, args)` (for `k<T, 4><<<...>>>`, the launcher of
    that instantiation's kernel), keeping the line count unchanged."""
    out, pos = [], 0
    code = _strip_comments_and_strings(text)
    for match in _LAUNCH.finditer(text):
        if match.start() < pos:
            continue
        name, explicit = match.group(1), ""
        template_args = _template_arguments(match.group(2), code) if match.group(2) else None
        if name in templates and template_args in templates[name].dispatched:
            name, explicit = templates[name].dispatched[template_args].launcher, "<scalar_t>"
        elif name in templates and template_args in templates[name].instances:
            name = templates[name].instances[template_args]
        elif name not in kernels or template_args is not None:
            raise SplitError(f"launch of {name} is not a plain launch of a kernel defined here")
        end_config = text.find(">>>", match.end())
        if end_config < 0:
            raise SplitError("unterminated <<< >>>")
        config = split_top_commas(text[match.end():end_config])
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
        out.append(f"{LAUNCH_PREFIX}{name}{explicit}(" + ", ".join(call_args) + ")" + "\n" * newlines)
        pos = args_end + 1
    out.append(text[pos:])
    return "".join(out)


def _normalized(template_args: str) -> str:
    return re.sub(r"\s+", " ", template_args.strip())


# `constexpr int threads = 256;` in the launching function: the kernels file does not see it, so a template argument
# naming it is replaced by its value (only where the function gives the name one literal value).
_LOCAL_CONSTANT = re.compile(r"\bconst(?:expr)?\s+(?:unsigned\s+|signed\s+)?(?:int|int32_t|int64_t|uint32_t|unsigned|"
                             r"long|size_t|bool)\s+(\w+)\s*=\s*(\d+[uUlL]*|true|false)\s*;")


def _template_arguments(written: str, host_code: str) -> str:
    """The template arguments of a launch (`<...>` as written), normalised, the launching code's constants
    replaced by their values."""
    args = _normalized(written[1:-1])
    values: dict[str, set[str]] = {}
    for name, value in _LOCAL_CONSTANT.findall(host_code):
        values.setdefault(name, set()).add(value)
    for name, found in values.items():
        if len(found) == 1:
            args = re.sub(rf"\b{name}\b", next(iter(found)), args)
    return args


def _template_of(body: str, match: re.Match) -> _Template:
    """The template parameters, kernel parameters and launch bounds of a templated kernel definition."""
    head = body[:match.start()]
    opening = head.find("<", re.search(r"\btemplate\b", head).end())
    depth, closing = 0, None
    for j in range(opening, len(head)):
        depth += {"<": 1, ">": -1}.get(head[j], 0)
        if depth == 0:
            closing = j
            break
    if opening < 0 or closing is None:
        raise SplitError(f"templated kernel {match.group(1)}: template parameter list not understood")
    params = []
    for param in split_top_commas(head[opening + 1:closing]):
        declared, _, default = param.partition("=")
        found = re.fullmatch(r"\s*(typename|class|[\w:]+(?:\s+[\w:]+)*)\s+(\w+)\s*", declared)
        if found is None or "..." in param:
            raise SplitError(f"templated kernel {match.group(1)}: template parameter '{param.strip()}' not understood")
        params.append((found.group(2), default.strip() or None, found.group(1) in ("typename", "class")))
    bounds = re.search(r"__launch_bounds__\s*\(", body[:match.end()])
    launch_bounds = body[bounds.end():_matching_paren(body, bounds.end() - 1)] if bounds else None
    return _Template(params, _parameter_list(body, match.end() - 1), launch_bounds)


def _collect_instances(host_code: str, templates: dict[str, _Template], kernels: dict[str, str]) -> None:
    """Each distinct `k<args><<<` of a templated kernel becomes an instance kernel (added to `kernels`); inside an
    AT_DISPATCH_* macro, arguments naming its `scalar_t` become one instance per type the macro dispatches to."""
    for match in _LAUNCH.finditer(host_code):
        template = templates.get(match.group(1))
        if template is None:
            continue
        if not match.group(2):
            raise SplitError(f"launch of templated kernel {match.group(1)} leaves its template arguments to deduction")
        args = _template_arguments(match.group(2), host_code)
        types = _dispatched_types(host_code, match.start()) if re.search(r"\bscalar_t\b", args) else None
        if types is not None:
            if args in template.instances:
                raise SplitError(f"{match.group(1)}<{args}> is launched both inside and outside an AT_DISPATCH")
            group = template.dispatched.setdefault(
                args, _Dispatched(f"__dice_{match.group(1)}_d{len(template.dispatched)}"))
            for cpp_type in types:
                if cpp_type not in group.wrappers:
                    wrapper = group.wrappers[cpp_type] = f"{group.launcher}_{len(group.wrappers)}"
                    kernels[wrapper] = _substituted(template.kernel_params, template,
                                                    _with_scalar_type(args, cpp_type), match.group(1))
            continue
        if args in template.dispatched:
            raise SplitError(f"{match.group(1)}<{args}> is launched both inside and outside an AT_DISPATCH")
        if args not in template.instances:
            wrapper = f"__dice_{match.group(1)}_{len(template.instances)}"
            template.instances[args] = wrapper
            kernels[wrapper] = _substituted(template.kernel_params, template, args, match.group(1))


def _dispatched_types(host_code: str, position: int) -> list[str] | None:
    """The C++ types `scalar_t` stands for at `position`: those of the innermost AT_DISPATCH_* macro call around
    it, or None outside any (then `scalar_t` is the code's own name). SplitError for a dispatch not known here."""
    enclosing = None
    for match in _DISPATCH_MACRO.finditer(host_code, 0, position):
        close = _matching_paren(host_code, match.end() - 1, "AT_DISPATCH call not closed")
        if close > position:
            enclosing = match
    if enclosing is None:
        return None
    macro = enclosing.group(1)
    base, extra = (macro, 0) if macro in _DISPATCH_TYPES else _DISPATCH_EXTRAS.get(macro, (None, 0))
    if base is None:
        raise SplitError(f"AT_DISPATCH_{macro}: its types are not known to the split")
    arguments = split_top_commas(host_code[enclosing.end():_matching_paren(host_code, enclosing.end() - 1)])
    names = list(_DISPATCH_TYPES[base])
    for argument in arguments[:extra]:
        found = _SCALAR_TYPE.fullmatch(argument)
        if found is None or found.group(1) not in _CPP_TYPES:
            raise SplitError(f"AT_DISPATCH_{macro}: scalar type '{argument.strip()}' not known to the split")
        names.append(found.group(1))
    return list(dict.fromkeys(_CPP_TYPES[name] for name in names))


def _with_scalar_type(args: str, cpp_type: str) -> str:
    return re.sub(r"\bscalar_t\b", cpp_type, args)


def _substituted(text: str, template: _Template, args: str, kernel: str) -> str:
    """`text` with the template's parameters replaced by `args` (then by their defaults)."""
    given = split_top_commas(args)
    if len(given) > len(template.params):
        raise SplitError(f"launch of {kernel}<{args}> has more template arguments than the kernel")
    for k, (name, default, is_type) in enumerate(template.params):
        value = given[k].strip() if k < len(given) else default
        if value is None:
            raise SplitError(f"launch of {kernel}<{args}> leaves template parameter {name} to deduction")
        text = re.sub(rf"\b{name}\b", value if is_type else f"({value})", text)
    return text


def _as_device_function(text: str, kernel: str) -> str:
    """A templated kernel's definition as a __device__ function template (its instance kernels call it); launch
    bounds move to the instance kernels. Line numbers stay the same."""
    head_end = re.search(rf"\b{re.escape(kernel)}\s*\(", text).start()
    head = re.sub(r"__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)",
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text[:head_end])
    head = _KERNEL_QUALIFIERS.sub(lambda m: " " * len(m.group(0)), head)
    return re.sub(r"\b__global__\b", "__device__ __forceinline__", head) + text[head_end:]


def _instance_kernel(kernel: str, template: _Template, args: str, wrapper: str) -> str:
    """The C-linkage kernel of one instantiation: the template's parameters, launch bounds and body."""
    decls, names = _named_parameters(_substituted(template.kernel_params, template, args, kernel))
    bounds = "" if template.launch_bounds is None else \
        f"__launch_bounds__({_substituted(template.launch_bounds, template, args, kernel)}) "
    return (f'extern "C" __global__ void {bounds}{wrapper}({", ".join(decls)}) '
            f'{{ {kernel}<{args}>({", ".join(names)}); }}')


def _matching_paren(text: str, open_index: int, unclosed: str = "unbalanced parentheses in a kernel launch") -> int:
    depth = 0
    for j in range(open_index, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise SplitError(unclosed)
