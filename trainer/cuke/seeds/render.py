"""Shared pieces of the built-in seed library: dtypes, the pair record, the markers kernel templates use for their
host code, and `make_pair`, which draws a problem writer and a code style for the pair and renders an ordinary
problem file and a `ModelNew` / `load_inline` candidate file from the generator's specs."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from .codestyle import MODES_ALIAS, Prelude, draw_code_style, render_candidate_file, style_cuda_source
from .rewrite import reorder_definitions
from .writers import ProblemWriter, draw_writer, model_signatures, render_problem


@dataclass(frozen=True)
class DType:
    """A tensor element type as it appears in PyTorch source and in CUDA source."""

    name: str  # short tag: fp32 / fp16 / bf16
    torch: str  # torch dtype expression
    ctype: str  # CUDA element type


FP32 = DType("fp32", "torch.float32", "float")
FP16 = DType("fp16", "torch.float16", "__half")
BF16 = DType("bf16", "torch.bfloat16", "__nv_bfloat16")
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
    variants: list["SeedPair"] = field(default_factory=list)  # rewrites of this pair (same problem, same program)


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
    """What a problem file needs: the reference forward (with «op» placeholders), constructor, sizes and inputs."""

    doc: str  # what the module computes, as a phrase ("a GELU followed by a scale")
    init_params: list[str]  # constructor parameter names
    init_body: str  # statements after super().__init__(); shared verbatim with ModelNew
    forward_params: list[str]
    forward_body: str  # reference statements, ending in a return
    constants: dict[str, object]  # size constants
    inputs: list[str]  # get_inputs() expressions
    init_inputs: list[str]  # get_init_inputs() expressions
    outputs: int = 1  # how many tensors forward returns
    writer: ProblemWriter | None = None  # set when the generator chose the writer itself
    family: str = ""  # set by make_pair (docstrings cite the family's paper)


@dataclass
class CandidateSpec:
    """What a candidate file needs: the kernel template body, the host entry point and the ModelNew forward."""

    stem: str  # base name of the host function (and of the kernels, `{stem}_kernel`)
    cuda_body: str  # kernels + host wrapper, written with the markers below
    prelude: Prelude
    init_params: list[str]
    init_body: str
    forward_params: list[str]
    forward_body: str  # calls `_ext_.<stem>(...)` (or the older `<stem>_ext.<stem>(...)`)


# ---------------------------------------------------------------- markers for the host code of kernel templates

def host_checks(fn: str, tensors: list[str], dtype: DType | str) -> str:
    """Device / contiguity / dtype checks of the float tensors a host wrapper receives (the style writes them)."""
    name = dtype if isinstance(dtype, str) else dtype.name
    return f"    @@CHECKS|{fn}|{','.join(tensors)}|{name}@@"


def index_checks(fn: str, tensors: list[str], dtype: str = "int64") -> str:
    return f"    @@CHECKS|{fn}|{','.join(tensors)}|{dtype}@@"


def ptr(name: str, const: bool = True) -> str:
    """Typed element pointer of a tensor argument in a host wrapper."""
    return f"@@PTR|{name}|{'c' if const else 'm'}@@"


def grid_1d(work: str, threads: int = 256, cap: int = 65535) -> str:
    """Host C++ expression: number of blocks for a grid-stride loop over `work` items."""
    return f"@@GRID|{work}|{threads}|{cap}@@"


def cdiv(a: str, b: int | str) -> str:
    """Host C++ expression: ceil(a / b), in the style's spelling."""
    return f"@@CDIV|{a}|{b}@@"


STREAM = "@@STREAM@@"
LAUNCH_CHECK = "    @@LAUNCH_CHECK@@"


def cuda_prelude(dtype: DType | str, reductions: bool | str | None = False, block_threads: int | None = None,
                 modes: tuple[str, ...] = MODES_ALIAS, headers: tuple[str, ...] = ()) -> Prelude:
    """What the template needs before its body: element type and conversions, block reductions (a flavour name,
    or True for warp shuffles), extra headers, and the dtype modes its kernels allow."""
    name = dtype if isinstance(dtype, str) else dtype.name
    flavour = "warp_shuffle" if reductions is True else (reductions or None)
    return Prelude(dtype=name, reductions=flavour, block_threads=block_threads, modes=modes, headers=headers)


def float_prelude(reductions: bool | str | None = False, block_threads: int | None = None,
                  headers: tuple[str, ...] = ()) -> Prelude:
    """For fp32 templates that spell `float` themselves (GEMM, convolution, pooling)."""
    flavour = "warp_shuffle" if reductions is True else (reductions or None)
    return Prelude(dtype="fp32", reductions=flavour, block_threads=block_threads, headers=headers, float_only=True)


# ---------------------------------------------------------------- pairs

def make_uid(family: str, *texts: str) -> str:
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    return f"{family}-{digest}"


# Share of pairs that also get a rewritten variant: the same problem and program in another code style, with the
# top-level definitions reordered where their dependencies allow.
REWRITE_SHARE = 0.15


def make_pair(rng: random.Random, family: str, families: list[str], level: int, composition: str, dtype: DType | str,
              problem: ProblemSpec, candidate: CandidateSpec, strategy: str, **meta) -> SeedPair:
    """Draw the pair's problem writer (unless the generator chose one) and code style, render both files and wrap
    them with their tags (`strategy`, `style`, the code-style choices); now and then add a rewritten variant."""
    dname = dtype if isinstance(dtype, str) else dtype.name
    writer = problem.writer or draw_writer(rng)
    problem.family = family
    pytorch_code = render_problem(problem, writer)
    cuda_code, style = _candidate_code(rng, problem, candidate, writer, dname, strategy, reorder=False)
    fams = list(dict.fromkeys([family] + families))
    tags = {"strategy": strategy, "style": writer.style, **meta}
    pair = SeedPair(uid=make_uid(family, pytorch_code, cuda_code), family=family, families=fams, level=level,
                    composition=composition, dtype=dname, pytorch_code=pytorch_code, cuda_code=cuda_code,
                    meta={**tags, "code_style": style.tag})
    if rng.random() < REWRITE_SHARE:
        code, variant_style = _candidate_code(rng, problem, candidate, writer, dname, strategy, reorder=True)
        if code != cuda_code:
            reordered = variant_style.tag.pop("reordered", False)
            pair.variants.append(SeedPair(
                uid=make_uid(family, pytorch_code, code), family=family, families=fams, level=level,
                composition=composition, dtype=dname, pytorch_code=pytorch_code, cuda_code=code,
                meta={**tags, "code_style": variant_style.tag, "rewrite_of": pair.uid,
                      "rewrite": "restyle+reorder" if reordered else "restyle"}))
    return pair


def _candidate_code(rng: random.Random, problem: ProblemSpec, candidate: CandidateSpec, writer: ProblemWriter,
                    dtype: str, strategy: str, reorder: bool):
    """The candidate file in a freshly drawn code style (and, for rewrites, with its definitions reordered)."""
    style = draw_code_style(rng, dtype, candidate.prelude.modes)
    source, host = style_cuda_source(candidate.cuda_body, candidate.prelude, style, candidate.stem, problem.doc,
                                     strategy)
    if reorder and rng.random() < 0.7:
        reordered = reorder_definitions(source, rng)
        if reordered is not None:
            source = reordered
            style.tag_extra["reordered"] = True
    init_sig, _, forward_sig = model_signatures(problem, writer)
    forward_body = candidate.forward_body.replace(f"{candidate.stem}_ext.", "_ext_.")
    code = render_candidate_file(source, host, candidate.stem, style, init_sig,
                                 writer.rename(candidate.init_body, problem), forward_sig,
                                 writer.rename(forward_body, problem), problem.doc)
    return code, style
