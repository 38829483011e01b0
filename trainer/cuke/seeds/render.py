"""Shared pieces of the built-in seed library: dtypes, the pair record, and the renderers that turn a kernel spec
into an ordinary KernelBench-shaped problem file and a `ModelNew` / `load_inline` candidate file."""

from __future__ import annotations

import hashlib
import textwrap
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DType:
    """A tensor element type as it appears in PyTorch source and in CUDA source."""

    name: str  # short tag: fp32 / fp16 / bf16
    torch: str  # torch dtype expression
    ctype: str  # CUDA element type
    scalar_type: str  # ATen scalar type constant, for host-side checks
    to_float: str  # CUDA expression template turning `{}` (an elem_t) into float
    from_float: str  # CUDA expression template turning `{}` (a float) into elem_t
    header: str  # extra include


FP32 = DType("fp32", "torch.float32", "float", "at::kFloat", "{}", "{}", "")
FP16 = DType("fp16", "torch.float16", "__half", "at::kHalf", "__half2float({})", "__float2half({})",
             "#include <cuda_fp16.h>\n")
BF16 = DType("bf16", "torch.bfloat16", "__nv_bfloat16", "at::kBFloat16", "__bfloat162float({})",
             "__float2bfloat16({})", "#include <cuda_bf16.h>\n")
DTYPES = {d.name: d for d in (FP32, FP16, BF16)}


@dataclass
class SeedPair:
    """One generated PyTorch -> CUDA pair: an ordinary problem file and candidate file, plus its tags."""

    uid: str
    family: str  # primary operator family (the template that made it)
    families: list[str]  # every operator family the pair exercises
    level: int  # 1 single op, 2 fused ops, 3 model sub-structure
    composition: str  # canonical op chain, e.g. "linear>bias>gelu>scale"; the unit of the held-out split
    dtype: str
    pytorch_code: str
    cuda_code: str
    meta: dict = field(default_factory=dict)


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)


def tensor_input(shape: list[str] | tuple, dtype: DType, kind: str = "randn") -> str:
    """Python expression for one random input tensor of `shape` (names or numbers)."""
    dims = ", ".join(str(s) for s in shape)
    suffix = "" if dtype is FP32 else f", dtype={dtype.torch}"
    if kind == "rand":
        return f"torch.rand({dims}{suffix})"
    if kind == "positive":
        return f"torch.rand({dims}{suffix}) + 0.5"
    return f"torch.randn({dims}{suffix})"


@dataclass
class ProblemSpec:
    """What a problem file needs: the reference forward, constructor, sizes and inputs."""

    doc: str
    init_params: list[str]  # constructor parameter names
    init_body: str  # statements after super().__init__(); shared verbatim with ModelNew
    forward_params: list[str]
    forward_body: str  # reference statements, ending in a return
    constants: dict[str, object]  # module-level size constants
    inputs: list[str]  # get_inputs() expressions
    init_inputs: list[str]  # get_init_inputs() expressions
    uses_math: bool = False


def render_problem(spec: ProblemSpec) -> str:
    """A KernelBench-shaped problem module: Model, size constants, get_inputs(), get_init_inputs()."""
    init_sig = ", ".join(["self"] + spec.init_params)
    fwd_sig = ", ".join(["self"] + spec.forward_params)
    init_body = _indent(spec.init_body, 8) if spec.init_body.strip() else ""
    lines = ["import math\n" if spec.uses_math else "", "import torch\nimport torch.nn as nn\n",
             "import torch.nn.functional as F\n\n\n",
             "class Model(nn.Module):\n", f'    """{spec.doc}"""\n\n',
             f"    def __init__({init_sig}):\n", "        super().__init__()\n"]
    if init_body:
        lines.append(init_body + "\n")
    lines += ["\n", f"    def forward({fwd_sig}):\n", _indent(spec.forward_body, 8) + "\n", "\n\n"]
    for name, value in spec.constants.items():
        lines.append(f"{name} = {value!r}\n")
    lines += ["\n\n", "def get_inputs():\n", f"    return [{', '.join(spec.inputs)}]\n", "\n\n",
              "def get_init_inputs():\n", f"    return [{', '.join(spec.init_inputs)}]\n"]
    return "".join(lines)


CUDA_PRELUDE = """#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
{header}
using elem_t = {ctype};

__device__ __forceinline__ float load_f(elem_t v) {{ return {to_float}; }}
__device__ __forceinline__ elem_t store_f(float v) {{ return {from_float}; }}
"""

WARP_REDUCE = """
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

// Block-wide reductions: every thread of the block must call them; all threads get the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : -INFINITY;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

__device__ __forceinline__ float block_min(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_min(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : INFINITY;
    if (warp == 0) v = warp_min(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}
"""


def cuda_prelude(dtype: DType, reductions: bool = False) -> str:
    """Includes, the element type and float conversion helpers (and block reductions when asked)."""
    text = CUDA_PRELUDE.format(header=dtype.header, ctype=dtype.ctype, to_float=dtype.to_float.format("v"),
                               from_float=dtype.from_float.format("v"))
    return text + (WARP_REDUCE if reductions else "")


def host_checks(fn: str, tensors: list[str], dtype: DType) -> str:
    """TORCH_CHECKs for device, dtype and contiguity of the float tensors a host wrapper receives."""
    dname = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dtype.name]
    out = []
    for t in tensors:
        out.append(f'    TORCH_CHECK({t}.is_cuda(), "{fn}: {t} must be a CUDA tensor");')
        out.append(f'    TORCH_CHECK({t}.scalar_type() == {dtype.scalar_type}, "{fn}: {t} must be {dname}");')
        out.append(f'    TORCH_CHECK({t}.is_contiguous(), "{fn}: {t} must be contiguous");')
    return "\n".join(out)


def index_checks(fn: str, tensors: list[str]) -> str:
    out = []
    for t in tensors:
        out.append(f'    TORCH_CHECK({t}.is_cuda() && {t}.scalar_type() == at::kLong, '
                   f'"{fn}: {t} must be a CUDA int64 tensor");')
        out.append(f'    TORCH_CHECK({t}.is_contiguous(), "{fn}: {t} must be contiguous");')
    return "\n".join(out)


def ptr(name: str, const: bool = True) -> str:
    """Typed element pointer of a tensor argument in a host wrapper."""
    q = "const " if const else ""
    return f"reinterpret_cast<{q}elem_t*>({name}.data_ptr())"


# The current stream (what at::cuda::getCurrentCUDAStream() returns), from the light c10 header: no cuBLAS/cuSPARSE
# headers needed, and a faster compile than ATen/cuda/CUDAContext.h.
STREAM = "c10::cuda::getCurrentCUDAStream()"
LAUNCH_CHECK = "    C10_CUDA_KERNEL_LAUNCH_CHECK();"


@dataclass
class CandidateSpec:
    """What a candidate file needs: the CUDA source, the host entry point and the ModelNew forward."""

    stem: str  # base name of the extension / entry function
    cuda_body: str  # kernels + host wrapper (after the prelude)
    prelude: str
    signature: str  # C++ declaration of the host function, without the trailing ';'
    init_params: list[str]
    init_body: str
    forward_params: list[str]
    forward_body: str  # calls `<stem>_ext.<stem>(...)`


def render_candidate(spec: CandidateSpec) -> str:
    """A `ModelNew` module that compiles its CUDA source with load_inline at import time."""
    cuda_source = spec.prelude + "\n" + textwrap.dedent(spec.cuda_body).strip("\n") + "\n"
    digest = hashlib.sha256(cuda_source.encode()).hexdigest()[:10]
    ext = f"{spec.stem}_ext"
    init_sig = ", ".join(["self"] + spec.init_params)
    fwd_sig = ", ".join(["self"] + spec.forward_params)
    init_body = _indent(spec.init_body, 8) if spec.init_body.strip() else ""
    parts = [
        "import torch\n", "import torch.nn as nn\n", "from torch.utils.cpp_extension import load_inline\n\n",
        f'{spec.stem}_cuda_source = r"""\n{cuda_source}"""\n\n',
        f'{spec.stem}_cpp_source = "{spec.signature};"\n\n',
        f"{ext} = load_inline(\n",
        f'    name="{spec.stem}_{digest}",\n',
        f"    cpp_sources={spec.stem}_cpp_source,\n",
        f"    cuda_sources={spec.stem}_cuda_source,\n",
        f'    functions=["{spec.stem}"],\n',
        '    extra_cuda_cflags=["-O3"],\n',
        "    verbose=False,\n",
        ")\n\n\n",
        "class ModelNew(nn.Module):\n",
        f"    def __init__({init_sig}):\n",
        "        super().__init__()\n",
    ]
    if init_body:
        parts.append(init_body + "\n")
    parts += ["\n", f"    def forward({fwd_sig}):\n", _indent(spec.forward_body, 8) + "\n"]
    return "".join(parts)


def make_uid(family: str, *texts: str) -> str:
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    return f"{family}-{digest}"


def make_pair(family: str, families: list[str], level: int, composition: str, dtype: DType,
              problem: ProblemSpec, candidate: CandidateSpec, **meta) -> SeedPair:
    """Render both files and wrap them with their tags."""
    pytorch_code = render_problem(problem)
    cuda_code = render_candidate(candidate)
    fams = list(dict.fromkeys([family] + families))
    return SeedPair(uid=make_uid(family, pytorch_code, cuda_code), family=family, families=fams, level=level,
                    composition=composition, dtype=dtype.name, pytorch_code=pytorch_code, cuda_code=cuda_code,
                    meta=dict(meta))


def grid_1d(work: str, threads: int = 256, cap: int = 65535) -> str:
    """Host C++ expression: number of blocks for a grid-stride loop over `work` items."""
    return f"(int)std::min<int64_t>(std::max<int64_t>(({work} + {threads - 1}) / {threads}, 1), {cap})"
