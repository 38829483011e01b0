"""Projections of a few token rows (a batch-1 or batch-2 decoding pass) as the streaming kernels of
few_row_linear.cu, with the RMSNorm before them and the residual add or SiLU·up after them fused in:
`dice::few_row_linear`.

The kernels are built with nvcc for the GPU in use the first time they are needed and cached on disk
(DICE_KERNEL_CACHE, default ~/.cache/dice-copilot/kernels), loaded with ctypes and checked by one small launch; a
process without nvcc, or where the build or that check fails, logs why once and keeps the torch path (`available`
is False). DICE_FEW_ROW_LINEAR=0 turns the kernels off. On a CPU (and for shapes the kernels do not take) the op is
the same arithmetic in torch ops. The kernels need an Ampere GPU or newer; the layer chain kernel (layer_tail) needs a
Hopper, and elsewhere each projection runs as its own kernel.
"""

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .kernel_switches import SWITCHES

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("few_row_linear.cu")
ENABLED = SWITCHES.few_row_linear
# Programmatic dependent launch (a kernel starts while the one before drains): DICE_PDL=0 turns it off for these
# kernels, the Triton ones (attention_kernels) and Inductor's.
PDL_ALLOWED = SWITCHES.pdl
MAX_ROWS = 16  # two 8-token mma columns; more rows go to cuBLAS, which is no longer latency-bound there
EPILOGUES = {"none": 0, "residual": 1, "silu_mul": 2}
# A decoding pass runs each layer's projections after attention (and the next layer's q/k/v) as one persistent
# chain kernel (layer_tail); DICE_PROJECTION_CHAIN=0 keeps one kernel a projection.
CHAIN_ENABLED = SWITCHES.projection_chain
# (tiles per CTA, warps) the source builds; with the norm fused, at most 8 warps (its registers spill at 16).
LAUNCH_SHAPES = ((1, 8), (1, 16), (2, 4), (2, 8), (2, 16))
BUILD_SECONDS = 300


@functools.cache
def pdl_supported(device: torch.device) -> bool:
    """Whether kernels on `device` may launch with PDL: allowed, and a CUDA GPU of compute capability 9.0 (Hopper)
    or newer."""
    return PDL_ALLOWED and device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def cache_dir() -> Path:
    return Path(os.environ.get("DICE_KERNEL_CACHE") or Path.home() / ".cache" / "dice-copilot" / "kernels")


def build(arch: str, nvcc: str | None = None) -> Path:
    """Compiles the source for `arch` (e.g. "90") into a shared library in cache_dir(), unless it is there;
    returns its path. Raises RuntimeError with nvcc's messages when the build fails."""
    nvcc = nvcc or shutil.which("nvcc") or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    if not Path(nvcc).exists():
        raise RuntimeError(f"nvcc not found (looked on PATH and in CUDA_HOME): {nvcc}")
    flags = ["-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join([nvcc, *flags]).encode()).hexdigest()[:16]
    library = cache_dir() / f"few_row_linear_{key}.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a process that loads it meanwhile never sees half a file.
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        result = subprocess.run([nvcc, *flags, "-o", str(built), str(SOURCE)], capture_output=True, text=True,
                                timeout=BUILD_SECONDS)
        if result.returncode != 0:
            raise RuntimeError(f"nvcc failed to build {SOURCE.name}:\n{result.stderr[-4000:]}")
        os.replace(built, library)
    return library


@functools.cache
def _library(device_index: int):
    """The loaded kernels for a GPU, or None (logged once) where they cannot be had: no nvcc, a failed build, or a
    library that does not launch or computes wrong results there (e.g. a toolkit newer than the driver)."""
    capability = torch.cuda.get_device_capability(device_index)
    if capability < (8, 0):  # bf16 tensor-core mma needs Ampere
        return None
    try:
        lib = ctypes.CDLL(str(build(f"{capability[0]}{capability[1]}")))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        log.warning("few-row projection kernels unavailable, using cuBLAS: %s", error)
        return None
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.dice_few_row_linear.argtypes = [ptr, i64, ptr, ptr, i64, ptr, ctypes.c_float, ptr, i64, i32, i32, i32, i32,
                                        i32, i32, i32, ptr]
    lib.dice_few_row_linear.restype = i32
    lib.dice_projection_chain.argtypes = [ptr, i32, i32, ptr, i32, ptr]
    lib.dice_projection_chain.restype = i32
    lib.dice_projection_chain_fits.argtypes = [ptr, i32, i32]
    lib.dice_projection_chain_fits.restype = i32
    lib.dice_projection_chain_state_bytes.restype = i32
    lib.dice_cuda_error_string.argtypes = [i32]
    lib.dice_cuda_error_string.restype = ctypes.c_char_p
    problem = _self_test(lib, torch.device("cuda", device_index))
    if problem:
        log.warning("few-row projection kernels failed their self-test on GPU %d, using cuBLAS: %s", device_index,
                    problem)
        return None
    return lib


def _self_test(lib, device: torch.device) -> str | None:
    """One small projection against F.linear; what went wrong, or None."""
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(3, 64, device=device, generator=generator).to(torch.bfloat16)
    weight = (torch.randn(32, 64, device=device, generator=generator) / 8).to(torch.bfloat16)
    try:
        got = _launch(lib, x, weight, None, None, 0.0, "none", (1, 8))
    except RuntimeError as error:
        return str(error)
    if not torch.allclose(got.float(), F.linear(x.float(), weight.float()), atol=5e-2, rtol=5e-2):
        return "its results differ from F.linear's"
    return None


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _loaded_library(device: torch.device):
    """_library for `device`; RuntimeError where the kernels are unavailable."""
    lib = _library(_device_index(device))
    if lib is None:
        raise RuntimeError("the few-row projection kernels are unavailable on this GPU (the log says why)")
    return lib


def _outputs(weight_rows: int, epilogue: str) -> int:
    """A projection's outputs: SiLU·up halves the [gate; up] rows."""
    return weight_rows // 2 if epilogue == "silu_mul" else weight_rows


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x [..., K] as the kernels read it: 2-D rows, a contiguous last dimension, 16-byte aligned (copied if not)."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1 or rows.stride(0) % 8 or rows.data_ptr() % 16:
        rows = rows.contiguous()
    return rows


# Evaluated once while torch.compile traces (never traced into: the build and ctypes would break the graph); the
# model calls it before (fuse_projections), so that the build and self-test never run inside a trace.
@torch.compiler.assume_constant_result
def available(device: torch.device) -> bool:
    """Whether the kernels are built, loaded and checked for `device` (a CUDA GPU of compute capability 8.0 or
    newer)."""
    return device.type == "cuda" and _library(_device_index(device)) is not None


def applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            norm_weight: torch.Tensor | None = None) -> bool:
    """Whether x @ weight.T runs as a few-row kernel: bf16 on a GPU that has them, at most MAX_ROWS rows, no bias,
    K a multiple of 32 and the outputs a multiple of 16 (silu_mul: 8 per half)."""
    n, k = weight.shape
    if norm_weight is not None and (norm_weight.dtype != torch.bfloat16 or not norm_weight.is_contiguous()):
        return False
    return (ENABLED and bias is None and x.is_cuda and x.dtype == weight.dtype == torch.bfloat16 and x.shape[-1] == k
            and x.shape[:-1].numel() <= MAX_ROWS and k % 32 == 0 and n % 16 == 0 and weight.is_contiguous()
            and available(x.device))


def launch_shape(n_out: int, k: int, epilogue: str, norm: bool) -> tuple[int, int]:
    """(tiles of 16 weight rows per CTA, warps per CTA) for a projection with K = k; a tile has 8 outputs with
    silu_mul. From the sweeps on an H200 (BENCHMARKS.md, decode runs 14 and 15): many tiles (gate/up) ran best as
    many small CTAs, fewer tiles (q/k/v, o_proj, down_proj) as about 128 CTAs of as many warps as fit, except that a
    short K (o_proj's 2048 over 16 warps: 128 each) ran best with two tiles a CTA (1.528 against 1.554-1.594 ms for
    the batch-1 forward)."""
    tiles = n_out // (8 if epilogue == "silu_mul" else 16)
    if tiles >= 512 and tiles % 2 == 0:
        return 2, 4
    if not norm and tiles % 2 == 0 and k <= 2048:
        return 2, 16
    return (2 if tiles >= 256 and tiles % 2 == 0 else 1), (8 if norm else 16)


def shape_fits(shape: tuple[int, int], n_out: int, epilogue: str, norm: bool) -> bool:
    """Whether the kernels have launch shape (tiles per CTA, warps) and it can run a projection of n_out outputs:
    its tiles (16 outputs, 8 with silu_mul) split into whole CTAs, and at most 8 warps with the norm fused."""
    tiles, warps = shape
    return (shape in LAUNCH_SHAPES and n_out % (tiles * (8 if epilogue == "silu_mul" else 16)) == 0
            and not (norm and warps > 8))


def project_rows(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
                 norm_weight: torch.Tensor | None, eps: float, epilogue: str,
                 shape: tuple[int, int] | None = None) -> torch.Tensor:
    """The kernel itself on 2-D x [rows, K] (last dim contiguous); `shape` overrides launch_shape (benchmarks
    sweep it). Returns out [rows, n_out]."""
    n_out = _outputs(weight.shape[0], epilogue)
    tiles, warps = shape = shape or launch_shape(n_out, x.shape[1], epilogue, norm_weight is not None)
    if not shape_fits(shape, n_out, epilogue, norm_weight is not None):
        raise ValueError(f"launch shape {tiles} tiles x {warps} warps does not fit {n_out} outputs")
    if x.stride(-1) != 1 or x.stride(0) % 8 or x.data_ptr() % 16 or not weight.is_contiguous() \
            or weight.data_ptr() % 16 or (norm_weight is not None and norm_weight.data_ptr() % 16):
        raise ValueError("few-row projection needs 16-byte aligned rows with a contiguous last dimension")
    return _launch(_loaded_library(x.device), x, weight, residual, norm_weight, eps, epilogue, (tiles, warps))


def _launch(lib, x, weight, residual, norm_weight, eps, epilogue, shape) -> torch.Tensor:
    """Launches the kernel for checked arguments on x's current stream."""
    rows, k = x.shape
    n_out = _outputs(weight.shape[0], epilogue)
    out = torch.empty((rows, n_out), device=x.device, dtype=x.dtype)
    if residual is not None and residual.stride(-1) != 1:
        residual = residual.contiguous()
    with torch.cuda.device(x.device):
        error = lib.dice_few_row_linear(
            x.data_ptr(), x.stride(0), weight.data_ptr(), residual.data_ptr() if residual is not None else None,
            residual.stride(0) if residual is not None else 0,
            norm_weight.data_ptr() if norm_weight is not None else None, eps, out.data_ptr(), out.stride(0), rows, k,
            n_out, EPILOGUES[epilogue], *shape, int(pdl_supported(x.device)),
            torch.cuda.current_stream(x.device).cuda_stream)
    if error:
        raise RuntimeError(f"few-row projection kernel failed to launch: {lib.dice_cuda_error_string(error).decode()}")
    return out


@dataclass(frozen=True)
class ChainStep:
    """One projection of a chain (project_chain): as few_row_linear's arguments; `residual` is a tensor or the
    index of an earlier step, whose output is then added."""
    weight: torch.Tensor
    epilogue: str = "none"
    norm_weight: torch.Tensor | None = None
    eps: float = 0.0
    residual: "torch.Tensor | int | None" = None


class _ChainPhase(ctypes.Structure):  # few_row_linear.cu's ChainPhase
    _fields_ = [("w", ctypes.c_void_p), ("x", ctypes.c_void_p), ("residual", ctypes.c_void_p),
                ("norm_weight", ctypes.c_void_p), ("out", ctypes.c_void_p), ("x_stride", ctypes.c_int64),
                ("residual_stride", ctypes.c_int64), ("out_stride", ctypes.c_int64), ("eps", ctypes.c_float),
                ("k", ctypes.c_int), ("n_out", ctypes.c_int), ("epilogue", ctypes.c_int)]


@functools.cache
def _chain_works(device_index: int) -> bool:
    """Whether the chain kernel runs on this GPU (a cooperative launch fails where its SMs cannot all take a CTA,
    e.g. under an MPS limit) and gives the few-row kernels' results; logged once where not."""
    device = torch.device("cuda", device_index)
    generator = torch.Generator(device=device).manual_seed(0)

    def matrix(n, k):
        return (torch.randn(n, k, device=device, generator=generator) / k ** 0.5).to(torch.bfloat16)

    x, first, second = matrix(8, 512), matrix(512, 512), matrix(1024, 512)
    norm_weight = torch.ones(512, device=device, dtype=torch.bfloat16)
    steps = [ChainStep(first, "residual", residual=x), ChainStep(second, "silu_mul", norm_weight, 1e-6)]
    try:
        got = project_chain(x, steps, new_chain_state(device))[1]
    except RuntimeError as error:
        log.warning("projection chain kernel unavailable on GPU %d, one kernel a projection: %s", device_index, error)
        return False
    h = project_rows(x, first, x, None, 0.0, "residual")
    if not torch.allclose(got.float(), project_rows(h, second, None, norm_weight, 1e-6, "silu_mul").float(),
                          atol=3e-2, rtol=2e-2):
        log.warning("projection chain kernel gave wrong results on GPU %d, one kernel a projection", device_index)
        return False
    return True


def _chain_supported(device: torch.device) -> bool:
    """Whether `device` can run the chain kernel at all: its bulk copies and mbarrier waits need Hopper (compute
    capability 9.0); built for an older GPU, its body is a trap, which would end the CUDA context."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def chain_available(device: torch.device) -> bool:
    """Whether project_chain may be used on `device`: the few-row kernels are available, the GPU is a Hopper or
    newer and the chain kernel passed its check there. Call it outside a trace (the model does, in
    fuse_projections)."""
    return available(device) and _chain_supported(device) and _chain_works(_device_index(device))


def new_chain_state(device: torch.device) -> torch.Tensor:
    """Zeroed device memory for project_chain's grid barrier, kept for all launches of a chain; no two chains may
    run on one at once. One int64: the CTAs' arrivals so far (CTAs x grid barriers passed)."""
    size = _loaded_library(device).dice_projection_chain_state_bytes() // 8
    return torch.zeros(size, dtype=torch.int64, device=device)


def chain_fits(rows: int, shapes: list[tuple[int, int, str]], device: torch.device) -> bool:
    """Whether project_chain takes steps of these (weight rows, K, epilogue) at `rows` token rows on `device` (a
    Hopper or newer GPU): every K a multiple of 512 and at most 6144 (3072 above 8 rows: each warp holds its slices
    of x in registers), every output a multiple of 16. The kernel source's rule, asked of it."""
    lib = _library(_device_index(device)) if _chain_supported(device) else None
    if lib is None:
        return False
    phases = (_ChainPhase * len(shapes))()
    for index, (n, k, epilogue) in enumerate(shapes):
        phases[index].k, phases[index].epilogue = k, EPILOGUES[epilogue]
        phases[index].n_out = _outputs(n, epilogue)
    return bool(lib.dice_projection_chain_fits(ctypes.addressof(phases), len(shapes), rows))


def _chain_phases(x: torch.Tensor, steps: list[ChainStep]):
    """The kernel's phase list for the steps on x, and the output tensors it writes."""
    rows = x.shape[0]
    outs, phases, source = [], (_ChainPhase * len(steps))(), x
    for index, step in enumerate(steps):
        n_out = _outputs(step.weight.shape[0], step.epilogue)
        out = torch.empty((rows, n_out), device=x.device, dtype=x.dtype)
        residual = outs[step.residual] if isinstance(step.residual, int) else step.residual
        phases[index] = _ChainPhase(
            step.weight.data_ptr(), source.data_ptr(), residual.data_ptr() if residual is not None else None,
            step.norm_weight.data_ptr() if step.norm_weight is not None else None, out.data_ptr(),
            source.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0), step.eps,
            step.weight.shape[1], n_out, EPILOGUES[step.epilogue])
        outs.append(out)
        source = out
    return phases, outs


def project_chain(x: torch.Tensor, steps: list[ChainStep], state: torch.Tensor) -> list[torch.Tensor]:
    """The steps as one persistent kernel (few_row_linear.cu, projection_chain_kernel): step 0 on x [rows, K]
    (contiguous), every later step on the output of the one before. Returns every step's output [rows, n_out].
    Raises RuntimeError where the launch fails (a step that does not fit, a GPU whose SMs cannot all take a CTA,
    a GPU older than Hopper)."""
    if not _chain_supported(x.device):
        raise RuntimeError("the projection chain kernel needs a GPU of compute capability 9.0 or newer")
    lib = _loaded_library(x.device)
    phases, outs = _chain_phases(x, steps)
    with torch.cuda.device(x.device):
        error = lib.dice_projection_chain(ctypes.addressof(phases), len(steps), x.shape[0], state.data_ptr(),
                                          int(pdl_supported(x.device)),
                                          torch.cuda.current_stream(x.device).cuda_stream)
    if error:
        raise RuntimeError(f"projection chain failed to launch: {lib.dice_cuda_error_string(error).decode()}")
    return outs


def layer_tail_applies(attention: torch.Tensor, o_weight: torch.Tensor, gate_up_weight: torch.Tensor,
                       down_weight: torch.Tensor, next_qkv_weight: torch.Tensor) -> bool:
    """Whether layer_tail runs as the chain kernel: allowed, the few-row kernels apply and the chain fits."""
    rows = attention.shape[:-1].numel()
    return (CHAIN_ENABLED and applies(attention, o_weight) and all(
                weight.dtype == torch.bfloat16 and weight.is_contiguous()
                for weight in (gate_up_weight, down_weight, next_qkv_weight))
            and chain_fits(rows, [(w.shape[0], w.shape[1], e) for w, e in (
                (o_weight, "residual"), (gate_up_weight, "silu_mul"), (down_weight, "residual"),
                (next_qkv_weight, "none"))], attention.device))


def layer_tail_steps(residual: torch.Tensor, o_weight: torch.Tensor, mlp_norm_weight: torch.Tensor,
                     gate_up_weight: torch.Tensor, down_weight: torch.Tensor, next_qkv_weight: torch.Tensor,
                     next_norm_weight: torch.Tensor, eps: float) -> list[ChainStep]:
    """layer_tail's projections as chain steps on the attention output: o_proj + residual [rows, H], RMSNorm +
    gate/up + SiLU·up, down_proj + residual (o_proj's output), then the next layer's RMSNorm + q/k/v."""
    return [ChainStep(o_weight, "residual", residual=residual),
            ChainStep(gate_up_weight, "silu_mul", mlp_norm_weight, eps),
            ChainStep(down_weight, "residual", residual=0),
            ChainStep(next_qkv_weight, "none", next_norm_weight, eps)]


# Declared free of mutation although the kernel advances `state`: nothing but the chain kernel reads it, and a
# declared mutation makes a compiled graph copy it back after every call (a kernel launch a layer).
@torch.library.custom_op("dice::layer_tail", mutates_args=())
def layer_tail(attention: torch.Tensor, residual: torch.Tensor, o_weight: torch.Tensor, mlp_norm_weight: torch.Tensor,
               gate_up_weight: torch.Tensor, down_weight: torch.Tensor, next_qkv_weight: torch.Tensor,
               next_norm_weight: torch.Tensor, eps: float, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer from its attention output [..., Hq * D] (before o_proj) to its output, and the next layer's
    q/k/v: o_proj + residual, RMSNorm + gate/up + SiLU·up, down_proj + residual (of o_proj's output), then the next
    layer's RMSNorm + q/k/v. Returns (the layer's output [..., H], the next q/k/v). As one persistent chain kernel
    (project_chain, with `state` from new_chain_state, one for each layer) where layer_tail_applies, else as
    few_row_linear's ops one at a time (the same function up to rounding)."""
    if layer_tail_applies(attention, o_weight, gate_up_weight, down_weight, next_qkv_weight):
        lead = residual.shape[:-1]
        steps = layer_tail_steps(residual.reshape(-1, residual.shape[-1]).contiguous(), o_weight, mlp_norm_weight,
                                 gate_up_weight, down_weight, next_qkv_weight, next_norm_weight, eps)
        outs = project_chain(_rows(attention), steps, state)
        return outs[2].view(*lead, -1), outs[3].view(*lead, -1)
    h = few_row_linear(attention, o_weight, residual, None, 0.0, "residual")
    gated = few_row_linear(h, gate_up_weight, None, mlp_norm_weight, eps, "silu_mul")
    out = few_row_linear(gated, down_weight, h, None, 0.0, "residual")
    return out, few_row_linear(out, next_qkv_weight, None, next_norm_weight, eps, "none")


@layer_tail.register_fake
def _(attention, residual, o_weight, mlp_norm_weight, gate_up_weight, down_weight, next_qkv_weight, next_norm_weight,
      eps, state):
    return residual.new_empty(residual.shape), residual.new_empty((*residual.shape[:-1], next_qkv_weight.shape[0]))


@torch.library.custom_op("dice::few_row_linear", mutates_args=())
def few_row_linear(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
                   norm_weight: torch.Tensor | None, eps: float, epilogue: str) -> torch.Tensor:
    """x [..., K] @ weight.T, x first RMS-normalised with norm_weight (and eps) when one is given, then by
    `epilogue`: "none"; "residual" (+ residual [..., N]); "silu_mul" (weight is [gate; up], 2N rows:
    silu(gate) * up, [..., N]). Each projection is rounded to x's dtype before the add or SiLU·up, as the unfused
    model rounds; the kernels normalise in the epilogue (bf16(x * norm_weight) into the mma, then 1 / rms), the
    torch ops as Qwen3 does. The kernels where `applies`, torch ops elsewhere."""
    if applies(x, weight, None, norm_weight):
        lead = x.shape[:-1]
        res2 = residual.reshape(-1, residual.shape[-1]) if residual is not None else None
        out = project_rows(_rows(x), weight, res2, norm_weight, eps, epilogue)
        return out.view(*lead, out.shape[-1])
    return torch_projection(x, weight, residual, norm_weight, eps, epilogue)


def torch_projection(x, weight, residual, norm_weight, eps, epilogue) -> torch.Tensor:
    """few_row_linear's function as torch ops, rounded as the unfused model rounds (Inductor fuses them)."""
    if norm_weight is not None:
        from .network import rms_norm  # (network imports this module)
        x = rms_norm(x, norm_weight, eps)
    y = F.linear(x, weight)
    if epilogue == "residual":
        return residual + y
    if epilogue == "silu_mul":
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return y


@few_row_linear.register_fake
def _(x, weight, residual, norm_weight, eps, epilogue):
    return x.new_empty((*x.shape[:-1], _outputs(weight.shape[0], epilogue)))
