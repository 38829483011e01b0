"""The trusted harness inside a worker process: imports the reference and the candidate, checks correctness and times
both (docs/validator.md#correctness, #timing). Started by worker.py as `python -m dice_copilot.validator.harness`."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import hashlib
import importlib.machinery
import importlib.util
import math
import os
import sys
import threading
import time
import traceback
import types

from .worker import FDS_ENV, FRESH_WORKER_FAILURES, SECRET_ENV, read_message, write_message

# Read and remove the secret before anything else can see it; per-job seeds are derived from it.
_SECRET = os.environ.pop(SECRET_ENV, "") or os.urandom(16).hex()

import torch  # noqa: E402  (after the secret is gone from the environment)
from torch.utils import _pytree as pytree  # noqa: E402

from .api import NOT_CHECKED_HERE, Budget  # noqa: E402
from .compile import CompileConfig, ExtensionBuilder  # noqa: E402
from .environment import diagnose_build  # noqa: E402
from .kernel_split import GLOBAL_KERNEL  # noqa: E402
from .problem import ExtensionSpec, bind_call  # noqa: E402
from .verdict import FailureCode, Stage  # noqa: E402

# Trusted references captured before any candidate code runs; re-checked after every job (monkey-patching defence).
_TRUSTED = {
    "torch.allclose": torch.allclose,
    "torch.equal": torch.equal,
    "torch.cuda.synchronize": torch.cuda.synchronize,
    "torch.cuda.Event": torch.cuda.Event,
    "torch.cuda.Event.record": torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
    "time.perf_counter": time.perf_counter,
    "torch.Tensor.clone": torch.Tensor.clone,
    "torch.Tensor.__eq__": torch.Tensor.__eq__,
}


def _trusted_now() -> dict:
    return {
        "torch.allclose": torch.allclose, "torch.equal": torch.equal,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "time.perf_counter": time.perf_counter, "torch.Tensor.clone": torch.Tensor.clone,
        "torch.Tensor.__eq__": torch.Tensor.__eq__,
    }


# The device jobs run on: "cuda" normally; "cpu" runs pure-PyTorch candidates (tests, GPU-less debugging).
_DEVICE = "cuda"


def _on_gpu() -> bool:
    return _DEVICE == "cuda"


def _sync() -> None:
    if _on_gpu():
        torch.cuda.synchronize()


def _tampered() -> list[str]:
    now = _trusted_now()
    return [name for name, fn in _TRUSTED.items() if now[name] is not fn]


class CandidateFailure(Exception):
    """A check did not pass; `code` is the Verdict.failure_code, the stage is the channel's current one."""

    def __init__(self, code: FailureCode, message: str, **details):
        super().__init__(message)
        self.code = code
        self.details = details


class Channel:
    """The harness's side of the pipes: announces each phase (its time budget and its stage) and sends results."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.stage = Stage.CORRECT  # the stage of the phase announced last
        self.current: tuple[str, float, Stage] | None = None  # the phase announced last

    def phase(self, name: str, budget_s: float, stage: Stage = Stage.CORRECT) -> None:
        self.stage, self.current = stage, (name, budget_s, stage)
        self.send({"event": "phase", "phase": name, "budget_s": budget_s, "stage": stage})

    def resume(self, phase: tuple[str, float, Stage] | None) -> None:
        """Announce a phase again, with a fresh budget (after a build that interrupted it)."""
        if phase is not None:
            self.phase(*phase)

    def send(self, obj) -> None:
        write_message(self.write_fd, obj)


# ---------------------------------------------------------------- loading code

_loaded_counter = 0


def _exec_module(source: str, filename: str, prefix: str) -> types.ModuleType:
    global _loaded_counter
    _loaded_counter += 1
    module = types.ModuleType(f"{prefix}_{_loaded_counter}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    finally:
        sys.modules.pop(module.__name__, None)
    return module


# Extension modules imported by this worker process, name -> .so path (see ExtensionLoader._import).
_IMPORTED_EXTENSIONS: dict[str, str] = {}


class ExtensionLoader:
    """Replaces torch's load_inline/load while the candidate imports: prebuilt objects are imported directly;
    anything the caller could not resolve statically is built here with the same builder (same cache)."""

    def __init__(self, job: dict, budget: Budget, channel: Channel):
        self.prebuilt = job["prebuilt"]
        self.config = CompileConfig(**job["compile_config"])
        self.budget = budget
        self.cu_path, self.cu_text = job.get("cu_path"), job.get("cu_text")
        self.channel = channel
        self.kernel_names: set[str] = set()
        self.built_here: list[dict] = []

    build_failure = (FailureCode.COMPILE_ERROR, "the extension built at import time failed to compile")

    def _read(self, path: str) -> str:
        if self.cu_path and os.path.abspath(path) == self.cu_path:
            return self.cu_text
        with open(path) as handle:
            return handle.read()

    def load_inline(self, *args, **kwargs):
        kwargs = bind_call("load_inline", args, kwargs)  # positional arguments as torch binds them
        if self.cu_path and self.cu_text is not None and os.path.exists(self.cu_path):
            disk = open(self.cu_path).read()
            cuda_sources = kwargs.get("cuda_sources")
            sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
            kwargs["cuda_sources"] = [self.cu_text if s == disk else s for s in sources]
        return self._import(ExtensionSpec.from_call_kwargs("load_inline", kwargs))

    def load(self, *args, **kwargs):
        kwargs = bind_call("load", args, kwargs)
        sources = kwargs.get("sources") or []
        kwargs["sources"] = [os.path.abspath(s) for s in ([sources] if isinstance(sources, (str, os.PathLike))
                                                          else sources)]
        return self._import(ExtensionSpec.from_call_kwargs("load", kwargs, read_file=self._read))

    def _import(self, spec: ExtensionSpec):
        for text in spec.cuda_sources:
            self.kernel_names.update(GLOBAL_KERNEL.findall(text))
        entry = self.prebuilt.get(spec.content_key())
        if entry is None:
            interrupted = self.channel.current
            self.channel.phase("compile", self.budget.compile_timeout_s + 5, Stage.COMPILE)
            result = ExtensionBuilder(self.config).build(spec, self.budget.compile_timeout_s)
            self.built_here.append({"ok": result.ok, "seconds": result.seconds, "cached": result.cached})
            if not result.ok:
                if missing := diagnose_build(result.log):
                    raise CandidateFailure(FailureCode.ENVIRONMENT, f"{NOT_CHECKED_HERE}: {missing.message}",
                                           compiler_log=result.log, environment=missing.to_dict())
                code, message = self.build_failure
                raise CandidateFailure(code, message, compiler_log=result.log,
                                       diagnostics=[d.__dict__ for d in result.diagnostics])
            entry = {"module_name": result.module_name, "so_path": result.so_path}
            self.channel.resume(interrupted)  # what the build interrupted goes on
        previous = _IMPORTED_EXTENSIONS.setdefault(entry["module_name"], entry["so_path"])
        if previous != entry["so_path"]:
            # This process would hand back the binary imported first under that name: never judge a stale one.
            raise CandidateFailure(FailureCode.STALE_EXTENSION, f"extension module {entry['module_name']} was already "
                                                                f"imported in this worker from another build")
        if not spec.is_python_module:  # torch's meaning: the library goes into torch.ops, the caller gets its path
            torch.ops.load_library(entry["so_path"])
            return entry["so_path"]
        loader = importlib.machinery.ExtensionFileLoader(entry["module_name"], entry["so_path"])
        module_spec = importlib.util.spec_from_file_location(entry["module_name"], entry["so_path"], loader=loader)
        module = importlib.util.module_from_spec(module_spec)
        try:
            loader.exec_module(module)
        except ImportError as exc:
            if "TSS key" in str(exc):  # pybind11 found no pthread key left: the worker's fault, not the candidate's
                raise CandidateFailure(FailureCode.WORKER_EXHAUSTED,
                                       f"this worker process ran out of thread keys importing "
                                       f"{entry['module_name']}") from exc
            raise
        return module


class ReferenceExtensionLoader(ExtensionLoader):
    """The reference's own load_inline/load calls (a file that holds `Model` beside its `ModelNew`, as the editor's
    files and the README's example do): an extension module is built only when the reference touches it, through
    the validator's builder. torch's loader would build every variant of the file in the worker, cold, within the
    reference's import budget; and a reference that only defines the extension for ModelNew never uses it."""

    build_failure = (FailureCode.BAD_INPUT, "the reference module's own extension (built by its load_inline/load) "
                                            "failed to compile: fix the reference, or point --reference at a file "
                                            "without it")

    def _import(self, spec: ExtensionSpec):
        if not spec.is_python_module:  # the library goes into torch.ops: nothing to defer to
            return super()._import(spec)
        return _DeferredExtension(lambda: super(ReferenceExtensionLoader, self)._import(spec))


class _DeferredExtension(types.ModuleType):
    """An extension module built and imported on first attribute access."""

    def __init__(self, build):
        super().__init__("dice_deferred_extension")
        self._build, self._module = build, None

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):  # copy/pickle/inspect probes do not build
            raise AttributeError(name)
        if self._module is None:
            self._module = self._build()
        return getattr(self._module, name)


@contextlib.contextmanager
def _patched_extension_loading(loader: ExtensionLoader):
    from torch.utils import cpp_extension
    saved = cpp_extension.load_inline, cpp_extension.load
    cpp_extension.load_inline, cpp_extension.load = loader.load_inline, loader.load
    try:
        yield
    finally:
        cpp_extension.load_inline, cpp_extension.load = saved


# ---------------------------------------------------------------- inputs

FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)



def _triton_kernel_names(candidate) -> set[str]:
    """The @triton.jit functions of the candidate's module (under autotune/heuristics wrappers too): Triton names
    the GPU kernel after the function, so these are the candidate's own kernels as much as its __global__ ones."""
    names = set()
    for value in type(candidate).forward.__globals__.values():
        unwrapped = False
        while type(value).__module__.startswith("triton.") and hasattr(value, "fn"):
            value, unwrapped = value.fn, True
        if unwrapped and callable(value) and hasattr(value, "__name__"):
            names.add(value.__name__)
    return names


def _seed_for(job_seed: int, *parts) -> int:
    digest = hashlib.sha256(f"{_SECRET}:{job_seed}:{parts}".encode()).digest()
    return int.from_bytes(digest[:6], "little")


def generate_inputs(module, seed: int, variant: str, dtype: torch.dtype | None) -> list:
    """get_inputs() evaluated directly on the GPU with a seeded generator, then reshaped to the variant's
    distribution: base (the problem's), signed normal, scaled x1e2 / x1e-2, heavy-tailed (Pareto)."""
    torch.manual_seed(seed)
    with torch.device(_DEVICE):
        inputs = list(module.get_inputs())
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.to(_DEVICE)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
            if x.is_floating_point():
                x = _apply_variant(x, variant)
        out.append(x)
    return out


def _apply_variant(x: torch.Tensor, variant: str) -> torch.Tensor:
    if variant == "base" or x.numel() == 0:
        return x
    if variant == "signed_normal":
        return torch.randn_like(x)
    if variant == "scaled_up":
        return x * 100.0
    if variant == "scaled_down":
        return x * 0.01
    if variant == "heavy_tailed":
        u = torch.rand_like(x, dtype=torch.float32).clamp_(min=1e-6)
        sign = torch.where(torch.rand_like(u) < 0.5, -1.0, 1.0)
        return (sign * (u.pow(-1.0 / 3.0) - 1.0)).to(x.dtype)
    raise ValueError(variant)


VARIANTS = ["base", "signed_normal", "heavy_tailed", "scaled_up", "scaled_down", "base"]


def _clone(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool((a == b).all())


def _poison_allocator(nbytes: int) -> None:
    """Fill soon-to-be-reused caching-allocator blocks with NaN so `torch::empty` outputs cannot inherit results."""
    if not _on_gpu():
        return
    free, _ = torch.cuda.mem_get_info()
    nbytes = int(min(nbytes, free * 0.25))
    if nbytes >= 4:
        block = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
        block.fill_(float("nan"))
        del block


def _tensor_bytes(values) -> int:
    return sum(t.numel() * t.element_size() for t in pytree.tree_leaves(values) if isinstance(t, torch.Tensor))


# ---------------------------------------------------------------- output comparison

def tolerances(dtype: torch.dtype, budget: Budget) -> tuple[float, float, float]:
    return budget.tolerances(half=dtype in (torch.float16, torch.bfloat16))


def compare_outputs(out, ref, inputs: list, budget: Budget, label: str, relax_atol: bool = False
                    ) -> tuple[list[float], list[float]]:
    """All output checks (docs/validator.md#correctness); raises CandidateFailure on the first violation, returns
    per-output max abs/rel errors.

    relax_atol (the extra scaled/heavy-tailed trials, beyond KernelBench's): atol grows with the reference's RMS so
    an honest kernel that only sums in another order passes; the relative-L2 bound still applies unchanged."""
    out_leaves, out_spec = pytree.tree_flatten(out)
    ref_leaves, ref_spec = pytree.tree_flatten(ref)
    if out_spec != ref_spec:
        raise CandidateFailure(FailureCode.INCORRECT,
                               f"{label}: output structure {out_spec} differs from the reference's "
                               f"{ref_spec}")
    input_ranges = [_storage_range(x) for x in inputs if isinstance(x, torch.Tensor) and x.numel()]
    abs_errors, rel_errors = [], []
    for i, (o, r) in enumerate(zip(out_leaves, ref_leaves)):
        name = f"{label}, output {i}"
        if not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor) or (o != r and not (isinstance(r, float) and math.isclose(o, r, rel_tol=1e-4))):
                raise CandidateFailure(FailureCode.INCORRECT, f"{name}: got {o!r}, expected {r!r}")
            continue
        if type(o) is not torch.Tensor:
            raise CandidateFailure(FailureCode.CHEAT,
                                   f"{name}: returned a {type(o).__name__}, not a plain torch.Tensor")
        if o.shape != r.shape:
            raise CandidateFailure(FailureCode.INCORRECT, f"{name}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise CandidateFailure(FailureCode.INCORRECT, f"{name}: dtype {o.dtype}, expected {r.dtype}")
        if o.device != r.device:
            raise CandidateFailure(FailureCode.INCORRECT, f"{name}: on {o.device}, expected {r.device}")
        if o.numel() and any(_overlaps(_storage_range(o), rng) for rng in input_ranges):
            raise CandidateFailure(FailureCode.INCORRECT,
                                   f"{name}: the output shares memory with an input; return a new "
                                   f"tensor")
        if not o.is_floating_point() and not o.is_complex():
            if not torch.equal(o, r):
                raise CandidateFailure(FailureCode.INCORRECT, f"{name}: integer/bool values differ from the reference")
            abs_errors.append(0.0)
            rel_errors.append(0.0)
            continue
        atol, rtol, rel_l2_tol = tolerances(r.dtype, budget)
        if relax_atol:
            atol = _relaxed_atol(atol, r)
        finite_o, finite_r = torch.isfinite(o), torch.isfinite(r)
        if not torch.equal(finite_o, finite_r):
            bad = int((finite_o != finite_r).sum())
            raise CandidateFailure(FailureCode.INCORRECT,
                                   f"{name}: {bad} elements are NaN/inf where the reference is not (or "
                                   f"the other way round)")
        of, rf = o.double()[finite_r], r.double()[finite_r]
        diff = (of - rf).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff / rf.abs().clamp_min(atol)).max()) if diff.numel() else 0.0
        rel_l2 = float(diff.norm() / rf.norm().clamp_min(1e-30)) if diff.numel() else 0.0
        abs_errors.append(max_abs)
        rel_errors.append(max_rel)
        if not torch.allclose(o[finite_r], r[finite_r], atol=atol, rtol=rtol) or \
                not _same_values(o[~finite_r], r[~finite_r]):
            raise CandidateFailure(FailureCode.INCORRECT,
                                   f"{name}: max abs error {max_abs:.3g} exceeds atol={atol:g}/rtol="
                                   f"{rtol:g}", max_abs_error=[max_abs], max_rel_error=[max_rel])
        if rel_l2 > rel_l2_tol and rf.norm() > 0:
            raise CandidateFailure(FailureCode.INCORRECT,
                                   f"{name}: relative L2 error {rel_l2:.3g} exceeds {rel_l2_tol:g} "
                                   f"(outputs are small; a near-constant answer is not enough)",
                                   max_abs_error=[max_abs], max_rel_error=[max_rel])
    return abs_errors, rel_errors


def _relaxed_atol(atol: float, ref: torch.Tensor) -> float:
    """atol grown with the reference's RMS (over its finite values), for the extra trials' scaled inputs."""
    finite = ref[torch.isfinite(ref)]
    return atol * max(1.0, float(finite.double().pow(2).mean().sqrt())) if finite.numel() else atol


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _checker_accepts(candidate, ref, budget) -> bool:
    try:
        compare_outputs(candidate, ref, [], budget, "probe")
        return True
    except CandidateFailure:
        return False


# ---------------------------------------------------------------- the job

class Job:
    def __init__(self, msg: dict, channel: Channel):
        self.msg = msg
        self.channel = channel
        self.budget = Budget(**msg["budget"])
        self.policy = msg["policy"]
        self.seed = int(msg.get("seed") or 0)
        self.flags: list[str] = []
        self.stage_times: dict[str, float] = {}
        self.details: dict = {}
        self.max_abs: list[float] = []
        self.max_rel: list[float] = []
        self.dtype = getattr(torch, self.budget.dtype) if self.budget.dtype else None

    def run(self) -> dict:
        call_timeout = self.budget.call_timeout_s
        t0 = time.monotonic()
        self.channel.phase("load_reference", call_timeout * 3)
        with _patched_extension_loading(ReferenceExtensionLoader(self.msg, self.budget, self.channel)):
            reference_module = _exec_module(self.msg["problem_source"],
                                            self.msg.get("problem_path") or "<reference>", "dice_reference")
        init_inputs = list(reference_module.get_init_inputs()) if hasattr(reference_module, "get_init_inputs") else []
        loader = self.loader = ExtensionLoader(self.msg, self.budget, self.channel)
        self.channel.phase("import_candidate", call_timeout * 3)
        threads_before = threading.active_count()
        try:
            with _patched_extension_loading(loader):
                candidate_module = _exec_module(self.msg["candidate_source"],
                                                self.msg.get("candidate_path") or "<candidate>", "dice_candidate")
        except CandidateFailure:
            raise
        except Exception as exc:
            raise CandidateFailure(FailureCode.RUNTIME_ERROR,
                                   f"importing the candidate raised {_describe(exc)}") from exc
        self.stage_times["import"] = time.monotonic() - t0
        if loader.built_here:
            self.details["built_in_worker"] = loader.built_here
        model_class = getattr(candidate_module, self.msg.get("candidate_class", "ModelNew"), None)
        if model_class is None:
            raise CandidateFailure(FailureCode.RUNTIME_ERROR, f"the candidate defines no class "
                                                              f"'{self.msg.get('candidate_class', 'ModelNew')}'")
        reference_class = getattr(reference_module, self.msg.get("problem_class", "Model"))

        t1 = time.monotonic()
        self.channel.phase("construct", call_timeout * 3)
        with _patched_extension_loading(loader):  # extensions built in ModelNew.__init__ go through the loader too
            reference, candidate = self._construct(reference_class, model_class, init_inputs)
        self._check_correctness(reference_module, reference, candidate, call_timeout)
        if (self.policy == "strict" or self.budget.attribution) and _on_gpu():
            t_attribution = time.monotonic()
            self._check_attribution(reference_module, candidate, call_timeout)
            self.stage_times["attribution"] = time.monotonic() - t_attribution  # part of the correct stage
        if threading.active_count() != threads_before:
            raise CandidateFailure(FailureCode.CHEAT,
                                   f"the candidate started {threading.active_count() - threads_before} "
                                   f"background thread(s)")
        self.stage_times[Stage.CORRECT] = time.monotonic() - t1
        result = {"stage": Stage.CORRECT, "max_abs_error": self.max_abs, "max_rel_error": self.max_rel}
        if self.budget.timing:
            t2 = time.monotonic()
            result.update(self._time(reference_module, reference, candidate, call_timeout))
            self.stage_times[Stage.TIMED] = time.monotonic() - t2
            result["stage"] = Stage.TIMED
        return result

    def _construct(self, reference_class, model_class, init_inputs):
        seed = _seed_for(self.seed, "init")
        torch.manual_seed(seed)
        with torch.device(_DEVICE):
            reference = reference_class(*init_inputs)
        torch.manual_seed(seed)
        try:
            with torch.device(_DEVICE):
                candidate = model_class(*init_inputs)
        except Exception as exc:
            raise CandidateFailure(FailureCode.RUNTIME_ERROR,
                                   f"ModelNew(*get_init_inputs()) raised {_describe(exc)}") from exc
        reference, candidate = reference.to(_DEVICE).eval(), candidate.to(_DEVICE).eval()
        if self.dtype is not None:
            reference, candidate = reference.to(self.dtype), candidate.to(self.dtype)
        ref_state, cand_state = reference.state_dict(), candidate.state_dict()
        same_layout = ref_state.keys() == cand_state.keys() and all(
            ref_state[k].shape == cand_state[k].shape for k in ref_state)
        if same_layout and ref_state:
            candidate.load_state_dict(ref_state)
        elif ref_state:
            self.flags.append("weights_not_copied")
        return reference, candidate

    def _call(self, model, inputs):
        with torch.no_grad():
            out = model(*inputs)
        _sync()
        return out

    def _check_correctness(self, module, reference, candidate, call_timeout):
        n_trials = max(5, self.budget.n_correct_trials)  # varied input distributions need at least 5
        first_inputs = None
        for trial in range(n_trials):
            variant = VARIANTS[trial % len(VARIANTS)]
            self.channel.phase(f"correctness trial {trial + 1} ({variant})", call_timeout * 3)
            pristine = generate_inputs(module, _seed_for(self.seed, "trial", trial), variant, self.dtype)
            cand_inputs = _clone(pristine)
            _sync()
            if _on_gpu():
                torch.cuda.empty_cache()
            _poison_allocator(2 * _tensor_bytes(pristine) + (64 << 20))
            try:  # the candidate runs first, so it cannot pick up the reference's freed output
                cand_out = self._call(candidate, cand_inputs)
            except Exception as exc:
                raise CandidateFailure(FailureCode.RUNTIME_ERROR, f"ModelNew.forward raised {_describe(exc)} "
                                                                  f"(trial {trial + 1}, {variant} inputs)") from exc
            ref_inputs = _clone(pristine)
            ref_out = self._call(reference, ref_inputs)
            if variant != "base" and not all(torch.isfinite(t).all() for t in pytree.tree_leaves(ref_out)
                                             if isinstance(t, torch.Tensor) and t.is_floating_point()):
                continue  # outside the operator's domain (e.g. log of negatives): keep the problem's distribution
            if first_inputs is None:
                first_inputs = pristine
                self._null_model_probe(module, reference, ref_out, pristine)
            self._check_inputs_untouched(cand_inputs, ref_inputs, f"trial {trial + 1}")
            try:
                abs_e, rel_e = compare_outputs(cand_out, ref_out, cand_inputs, self.budget,
                                               f"trial {trial + 1} ({variant} inputs)", relax_atol=variant != "base")
            except CandidateFailure as failure:
                # Only the extra trials' value checks may be excused, and only by the reference's own error.
                if variant == "base" or "max_abs_error" not in failure.details or \
                        not self._as_accurate_as_reference(reference, pristine, cand_out, ref_out):
                    raise
                abs_e, rel_e = failure.details["max_abs_error"], failure.details["max_rel_error"]
            self.max_abs = [max(a, b) for a, b in zip(self.max_abs, abs_e)] if self.max_abs else abs_e
            self.max_rel = [max(a, b) for a, b in zip(self.max_rel, rel_e)] if self.max_rel else rel_e
            del cand_out, ref_out
        self._check_determinism(candidate, first_inputs, call_timeout)

    def _as_accurate_as_reference(self, reference, inputs, cand_out, ref_out) -> bool:
        """The extra trials scale inputs to where the reference's own rounding can pass the tolerance (float16
        sums of values in the hundreds, attention scores in the thousands), so a kernel that keeps more precision
        than the reference fails it. Against the reference run in float64, such a kernel is no further off than
        the reference itself plus the tolerance; one that is wrong is."""
        try:
            exact_model = copy.deepcopy(reference).double()
            with torch.no_grad():
                exact = exact_model(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                      for x in _clone(inputs)])
        except Exception:  # noqa: BLE001 - no float64 run (an op without it, out of memory): the failure stands
            return False
        leaves = [pytree.tree_leaves(t) for t in (cand_out, ref_out, exact)]
        if len({len(group) for group in leaves}) != 1:
            return False
        for o, r, e in zip(*leaves):
            if not (isinstance(r, torch.Tensor) and r.is_floating_point() and isinstance(e, torch.Tensor)):
                continue  # other outputs passed or failed the comparison on their own
            if o.shape != r.shape or e.shape != r.shape:
                return False
            atol, rtol, _ = tolerances(r.dtype, self.budget)
            atol, finite = _relaxed_atol(atol, r), torch.isfinite(r)
            e = e.double()[finite]
            own_error = (r.double()[finite] - e).abs()
            if ((o.double()[finite] - e).abs() > atol + rtol * e.abs() + own_error).any():
                return False
        return True

    def _check_inputs_untouched(self, cand_inputs, ref_inputs, label):
        for i, (c, r) in enumerate(zip(cand_inputs, ref_inputs)):
            if isinstance(c, torch.Tensor) and not _same_values(c, r):
                raise CandidateFailure(FailureCode.CHEAT,
                                       f"{label}: the candidate modified input {i} (the reference does "
                                       f"not); compute into a new output tensor")

    def _null_model_probe(self, module, reference, ref_out, inputs):
        """If trivial answers pass the checker on this problem, say so (docs/validator.md#correctness)."""
        leaves, spec = pytree.tree_flatten(ref_out)
        if not leaves or not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in leaves):
            return
        probes = {"zeros": pytree.tree_unflatten([torch.zeros_like(t) for t in leaves], spec)}
        # A constant of the output's mean; for a single-value output (a loss) that is the reference's own answer, so
        # there only the other-seed probe can tell whether a constant would pass.
        if any(t.numel() > 1 for t in leaves):
            probes["mean"] = pytree.tree_unflatten([torch.full_like(t, float(t.float().mean())) for t in leaves], spec)
        first = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        if first is not None and len(leaves) == 1 and first.shape == leaves[0].shape and first.dtype == leaves[0].dtype:
            probes["identity"] = first.clone()
        other_inputs = generate_inputs(module, _seed_for(self.seed, "probe"), "base", self.dtype)
        probes["other_seed"] = self._call(reference, other_inputs)
        passing = [name for name, probe in probes.items() if _checker_accepts(probe, ref_out, self.budget)]
        if passing:
            self.flags.append("degenerate_problem")
            self.details["trivial_answers_that_pass"] = passing

    def _check_determinism(self, candidate, inputs, call_timeout):
        if inputs is None:
            return
        self.channel.phase("determinism", call_timeout * 3)
        first = self._call(candidate, _clone(inputs))
        second = self._call(candidate, _clone(inputs))
        for a, b in zip(pytree.tree_leaves(first), pytree.tree_leaves(second)):
            if not isinstance(a, torch.Tensor):
                continue
            if _same_values(a, b):
                continue
            atol, rtol, _ = tolerances(a.dtype, self.budget)
            if a.is_floating_point() and torch.allclose(a, b, atol=atol / 10, rtol=rtol / 10, equal_nan=True):
                self.flags.append("nondeterministic_within_tolerance")
            else:
                raise CandidateFailure(FailureCode.INCORRECT, "two calls on identical inputs gave different outputs "
                                                              "(uninitialised memory or a race)")

    def _check_attribution(self, module, candidate, call_timeout):
        """strict: kernels compiled from the candidate must do most of the GPU work
        (docs/validator.md#kernel-attribution)."""
        self.channel.phase("kernel attribution", call_timeout * 5)
        from torch.profiler import ProfilerActivity, profile
        inputs = generate_inputs(module, _seed_for(self.seed, "attribution"), "base", self.dtype)
        self._call(candidate, _clone(inputs))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self._call(candidate, inputs)
        kernel_names = (set(self.msg.get("kernel_names", [])) | self.loader.kernel_names
                        | _triton_kernel_names(candidate))
        total = ours = 0.0
        launched = []
        for event in prof.events():
            if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            duration = event.time_range.elapsed_us()  # a kernel event's own span on the GPU
            total += duration
            if any(name in event.name for name in kernel_names):
                ours += duration
                launched.append(event.name)
        share = ours / total if total > 0 else 0.0
        self.details["candidate_kernel_share"] = share
        threshold = self.budget.attribution_threshold
        if not launched:
            raise CandidateFailure(FailureCode.CHEAT,
                                   "no kernel compiled from the candidate ran on the GPU; the work is done "
                                   "by PyTorch/library kernels")
        if share < threshold:
            raise CandidateFailure(FailureCode.CHEAT,
                                   f"the candidate's own kernels account for {share:.0%} of GPU time "
                                   f"(strict policy requires {threshold:.0%}); the rest is PyTorch/library "
                                   f"kernels")

    def _time(self, module, reference, candidate, call_timeout) -> dict:
        """Interleaved, L2-flushed, rotating-input timing with rechecked outputs (docs/validator.md#timing)."""
        n_sets = max(8, self.budget.timing_input_sets)  # fewer sets would fit in L2 together
        max_trials = self.budget.timing_trials
        min_trials = min(max_trials, self.budget.min_timing_trials)
        wall_budget = self.budget.timing_budget_s
        self.channel.phase("timing: inputs", call_timeout * 3 + 10, Stage.TIMED)
        sets = [generate_inputs(module, _seed_for(self.seed, "timing", k), "base", self.dtype) for k in range(n_sets)]
        expected = [self._call(reference, _clone(s)) for s in sets]
        l2 = (getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) if _on_gpu() else 0) or (64 << 20)
        flush = torch.empty(max(2 * l2, 256 << 20) // 4, dtype=torch.int32, device=_DEVICE)
        self.channel.phase("timing: warmup", call_timeout * 8 + 10, Stage.TIMED)
        for k in range(3):
            self._call(reference, sets[k])
            self._call(candidate, sets[k])
        self.channel.phase("timing", wall_budget * 2 + call_timeout * 4 + 10, Stage.TIMED)
        threads_before = threading.active_count()
        times = {"reference": [], "candidate": []}
        walls = {"reference": [], "candidate": []}
        last_out = {}
        start_wall = time.monotonic()
        trial = 0
        while trial < max_trials + 1:
            order = (("reference", reference), ("candidate", candidate)) if trial % 2 == 0 else \
                (("candidate", candidate), ("reference", reference))
            inputs = sets[trial % n_sets]
            for label, model in order:
                _sync()
                flush.zero_()
                timer = _EventTimer() if _on_gpu() else _HostTimer()
                host_start = time.perf_counter()
                timer.start()
                with torch.no_grad():
                    out = model(*inputs)
                timer.stop()
                _sync()
                host_ms = (time.perf_counter() - host_start) * 1e3
                if trial > 0:  # the first trial is discarded
                    times[label].append(timer.elapsed_ms())
                    walls[label].append(host_ms)
                if label == "candidate":
                    last_out[trial % n_sets] = out
            trial += 1
            elapsed = time.monotonic() - start_wall
            if trial > min_trials and (elapsed > wall_budget or _sem_below(times["candidate"], 0.01)
                                       and _sem_below(times["reference"], 0.01)):
                break
        if threading.active_count() != threads_before:
            raise CandidateFailure(FailureCode.CHEAT, "the candidate started background threads during timing")
        for k, out in last_out.items():
            compare_outputs(out, expected[k], sets[k], self.budget, f"timed call on input set {k}")
        stats = {label: _stats(values) for label, values in times.items()}
        wall_stats = {label: _stats(values) for label, values in walls.items()}
        cand_event, cand_wall = stats["candidate"]["median_ms"], wall_stats["candidate"]["median_ms"]
        if looks_like_hidden_work(cand_event, cand_wall, stats["reference"]["median_ms"],
                                  wall_stats["reference"]["median_ms"]):
            self.flags.append("possible_stream_or_thread_injection")
            stats["candidate"] = wall_stats["candidate"]
            stats["reference"] = wall_stats["reference"]
        speedup = stats["reference"]["median_ms"] / max(stats["candidate"]["median_ms"], 1e-9)
        if speedup > 10:
            self.flags.append("excessive_speedup")
        self._check_roofline(stats["candidate"]["median_ms"], expected[0])
        self.details["timing_env"] = {"device": torch.cuda.get_device_name(0) if _on_gpu() else "cpu",
                                      "torch": torch.__version__, "cuda": torch.version.cuda, "input_sets": n_sets,
                                      "budget_s": wall_budget}
        return {"timing": stats, "speedup": speedup,
                "mean_speedup": stats["reference"]["mean_ms"] / max(stats["candidate"]["mean_ms"], 1e-9)}

    def _check_roofline(self, candidate_ms: float, reference_out) -> None:
        """Writing the outputs alone takes bytes / peak bandwidth; anything faster did not write them."""
        peak = _peak_bandwidth(torch.cuda.get_device_name(0)) if _on_gpu() else None
        if peak is None:
            return
        floor_ms = _tensor_bytes(reference_out) / peak * 1e3
        if candidate_ms * 1.1 < floor_ms:
            raise CandidateFailure(FailureCode.CHEAT,
                                   f"measured {candidate_ms:.4f} ms is below the memory-bandwidth floor "
                                   f"{floor_ms:.4f} ms for writing the outputs; the timing is not real")


class _EventTimer:
    def __init__(self):
        self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def start(self):
        self._start.record()

    def stop(self):
        self._end.record()

    def elapsed_ms(self) -> float:
        return self._start.elapsed_time(self._end)


class _HostTimer:
    def start(self):
        self._t0 = time.perf_counter()

    def stop(self):
        self._t1 = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (self._t1 - self._t0) * 1e3


_PEAK_BW = {"H200": 4.8e12, "H100": 3.35e12, "H20": 4.0e12, "A100": 2.0e12, "B200": 8.0e12, "L40S": 0.864e12,
            "RTX 4090": 1.0e12}


def looks_like_hidden_work(cand_event: float, cand_wall: float, ref_event: float, ref_wall: float) -> bool:
    """Median event and host wall times (ms) of the candidate and the reference -> whether the candidate's calls
    take so much more host time than GPU time that work may run on another stream or thread.

    The basic rule (wall > 1.5x event and > 50 us beyond it, for the candidate and not the reference), and the
    candidate's host time beyond its GPU time must also exceed twice the reference's: that much is the call's own
    cost (Python, the launch, the sync), paid by both, while hidden work adds to the candidate's alone. Without it,
    tiny kernels on a busy host were flagged (14% of a CuKe build's pairs while every core compiled)."""
    ref_excess = max(0.0, ref_wall - ref_event)
    reference_too = ref_wall > 1.5 * ref_event and ref_excess > 0.05
    return cand_wall > 1.5 * cand_event and cand_wall - cand_event > 0.05 + 2 * ref_excess and not reference_too


def _peak_bandwidth(name: str) -> float | None:
    for key, value in _PEAK_BW.items():
        if key in name:
            return value
    return None


def _sem_below(values: list[float], fraction: float) -> bool:
    if len(values) < 5:
        return False
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var / len(values)) < fraction * mean


def _stats(values: list[float]) -> dict:
    ordered = sorted(values)
    n = len(ordered)
    mean = sum(ordered) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in ordered) / max(n - 1, 1))
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"median_ms": median, "mean_ms": mean, "std_ms": std, "n": n, "min_ms": ordered[0], "max_ms": ordered[-1]}


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 600 else text[:600] + "..."


def _cuda_is_healthy() -> bool:
    """After an error: a sticky CUDA error (illegal address, launch failure) poisons the context for good."""
    if not _on_gpu():
        return True
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").sum().item()) == 1.0
    except Exception:
        return False


# pthread keys are a per-process budget (1,024 with glibc). Imported extensions and profiler sessions can each hold
# one for good: a CuKe build's worker ran out after some hundred candidates, so that the next import failed ("could
# not initialize the TSS key") or aborted. A worker with fewer than this many left is replaced after its job.
SPARE_THREAD_KEYS = 64
_LIBC = ctypes.CDLL(None)


def thread_keys_running_out(spare: int = SPARE_THREAD_KEYS) -> bool:
    """Whether fewer than `spare` pthread keys are left in this process (found by creating and deleting them)."""
    try:
        create, delete = _LIBC.pthread_key_create, _LIBC.pthread_key_delete
    except AttributeError:  # not a glibc-like C library: nothing to watch
        return False
    keys, key = [], ctypes.c_uint()
    try:
        while len(keys) < spare and create(ctypes.byref(key), None) == 0:
            keys.append(key.value)
    finally:
        for value in keys:
            delete(ctypes.c_uint(value))
    return len(keys) < spare


def _run_job(msg: dict, channel: Channel) -> dict:
    """The job's outcome: passed, the stage that ran last ("stage"; where it stopped when it failed), failure_code
    and failure when it failed, flags, stage_times and details; `recycle` asks for a fresh worker."""
    global _DEVICE
    _DEVICE = msg["device"]
    channel.stage = Stage.CORRECT
    job = Job(msg, channel)
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references must not silently use TF32
    torch.backends.cudnn.allow_tf32 = False
    recycle = False
    try:
        outcome = job.run()
        outcome.update(passed=True)
    except CandidateFailure as failure:
        outcome = {"passed": False, "failure_code": failure.code, "failure": str(failure), **failure.details}
        recycle = failure.code in FRESH_WORKER_FAILURES or not _cuda_is_healthy()
    except torch.cuda.OutOfMemoryError as exc:
        outcome = {"passed": False, "failure_code": FailureCode.RUNTIME_ERROR,
                   "failure": f"GPU out of memory: {exc}"[:600]}
        recycle = not _cuda_is_healthy()
    except Exception as exc:
        healthy = _cuda_is_healthy()
        outcome = {"passed": False, "failure_code": FailureCode.RUNTIME_ERROR if healthy else FailureCode.CRASH,
                   "failure": _describe(exc) + ("" if healthy else " (CUDA context is unusable afterwards)"),
                   "traceback": traceback.format_exc()[-3000:]}
        recycle = not healthy
    outcome.setdefault("stage", channel.stage)
    tampered = _tampered()
    if tampered:
        outcome.update(passed=False, failure_code=FailureCode.CHEAT,
                       failure=f"the candidate replaced harness functions: {', '.join(tampered)}")
        recycle = True
    if (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) != (False, False):
        job.flags.append("changed_tf32_flags")
        recycle = True
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    recycle = recycle or thread_keys_running_out()
    outcome.update(event="result", flags=job.flags, stage_times=job.stage_times, details=job.details,
                   recycle=recycle)
    if _on_gpu():
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    return outcome


WARM_UP_PROBLEM = """
import torch
class Model(torch.nn.Module):
    def forward(self, x, y):
        return torch.softmax(torch.relu(x) * y + 1.0, dim=-1).sum(dim=0)
def get_inputs():
    return [torch.randn(64, 256), torch.randn(64, 256)]
def get_init_inputs():
    return []
"""


class _SilentChannel(Channel):
    def __init__(self):
        super().__init__(-1, -1)

    def send(self, obj) -> None:
        pass


def warm_up(device: str) -> dict:
    """One small verdict before the first real one: the first verdict of a fresh process pays for the CUDA context,
    the checker's kernels and the allocator's pools (0.7 s more than the next on an H200), which a user's first
    suggestion should not wait for. Returns its outcome."""
    from dataclasses import asdict

    msg = {"problem_source": WARM_UP_PROBLEM, "candidate_source": WARM_UP_PROBLEM + "ModelNew = Model\n",
           "policy": "ide", "device": device, "budget": asdict(Budget(timing=False)), "seed": 0, "prebuilt": {},
           "kernel_names": [], "compile_config": {}}
    return _run_job(msg, _SilentChannel())


def main() -> None:
    from . import compile as compile_module
    compile_module.COMPILERS_IN_OWN_GROUP = False  # builds here die with this worker when it is killed
    read_fd, write_fd = (int(x) for x in os.environ.pop(FDS_ENV).split(","))
    channel = Channel(read_fd, write_fd)
    device = None
    if torch.cuda.is_available():
        torch.cuda.init()
        device = torch.cuda.get_device_name(0)
        with contextlib.suppress(Exception):  # only a head start: a failure here changes no verdict
            warm_up("cuda")
    channel.send({"event": "ready", "device": device})
    while True:
        try:
            msg = read_message(read_fd)
        except EOFError:
            return
        if msg.get("op") == "exit":
            return
        if msg.get("op") == "validate":
            channel.send(_run_job(msg, channel))


if __name__ == "__main__":
    main()
