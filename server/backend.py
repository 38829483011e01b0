"""The server's only door to the model and the validator (docs/architecture.md#contracts): checkpoint loading, the
engine call, DICE prompts and code extraction, and the validation request run inside the validation worker process.

`DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS=path.json` (tests only) makes `generate_texts` return known completions for
matching prompts instead of decoding, so end-to-end tests can show a *validated* suggestion without a trained model;
everything else (model load, splicing, validation) stays real.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from dice_copilot.server.settings import Decoding
from dice_copilot.validator.verdict import FailureCode, Outcome, Stage

SCRIPTED_COMPLETIONS_ENV = "DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS"


# --------------------------------------------------------------------------------------------------------------------
# Model


@dataclass
class LoadedModel:
    """A checkpoint in memory with its engine; `checkpoint_id` changes whenever different weights are loaded."""

    engine: Any
    tokenizer: Any
    checkpoint: str
    checkpoint_id: str
    device: str
    load_seconds: float
    # Marked untrained by its config.json or model card (model/checkpoint.py: read_config): its output is noise.
    untrained: bool = False
    # The decoding defaults in its generation_config.json (model/checkpoint.py: read_decoding_defaults).
    decoding_defaults: dict = field(default_factory=dict)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_device(setting: str) -> str:
    """"auto" → "cuda" when a CUDA device exists, else "cpu"; a CUDA device asked for but absent is an error."""
    if setting == "auto":
        return "cuda" if cuda_available() else "cpu"
    if setting.startswith("cuda") and not cuda_available():
        raise RuntimeError(f"device {setting!r} was asked for but no CUDA device is visible; set diceCopilot.device "
                           f"to \"cpu\" or \"auto\"")
    return setting


def checkpoint_fingerprint(checkpoint: str | None) -> str:
    """Name plus file sizes and modification times: two loads of the same files give the same id."""
    if not checkpoint or checkpoint == "default":
        return "default"
    folder = Path(checkpoint)
    parts = [str(folder.resolve())]
    if folder.is_dir():
        for item in sorted(folder.iterdir()):
            try:
                stat = item.stat()
            except OSError:
                continue
            parts.append(f"{item.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def load_model(checkpoint: str | None, device: str) -> LoadedModel:
    """Load a checkpoint (None / "default": the embedded default) and build its engine. Raises
    `dice_copilot.model.CheckpointError` (bad checkpoint) or RuntimeError (device) with a message naming the cause."""
    from dice_copilot.model import load
    from dice_copilot.model.checkpoint import read_decoding_defaults
    from dice_copilot.model.engine import BlockDiffusionEngine

    started = time.perf_counter()
    resolved = resolve_device(device)
    fingerprint = checkpoint_fingerprint(checkpoint)
    model, tokenizer = load(checkpoint or "default", device=resolved)
    decoding_defaults = read_decoding_defaults(checkpoint or "default")
    engine = BlockDiffusionEngine(model, tokenizer, device=resolved)
    return LoadedModel(engine, tokenizer, checkpoint or "default", fingerprint, resolved,
                       time.perf_counter() - started, untrained=bool(model.config.untrained),
                       decoding_defaults=decoding_defaults)


@dataclass(frozen=True)
class GenerationRequest:
    """One engine call: a prompt decoded into `decoding.maxCandidates` candidates. `prefix`/`suffix` are set for
    infill (used by the scripted test backend to build a whole-file answer)."""

    kind: str  # "infill" or "kernel"
    prompt: str
    decoding: Decoding  # settings.decoding_for the loaded checkpoint
    max_new_tokens: int
    prefix: str = ""
    suffix: str = ""
    pytorch_code: str = ""


@dataclass(frozen=True)
class GeneratedText:
    text: str
    finish_reason: str
    forward_passes: int
    generated_tokens: int
    wall_time_s: float


def build_infill_prompt(pytorch_code: str, prefix: str, suffix: str) -> str:
    from dice_copilot.model.prompts import infill_prompt

    return infill_prompt(pytorch_code, prefix, suffix)


def fit_infill_prompt(loaded: LoadedModel, pytorch_code: str, prefix: str, suffix: str,
                      middle_tokens: int) -> tuple[str, str, str | None, int]:
    """(prefix, suffix, prompt, answer token budget) with prefix and suffix trimmed (far lines first) until prompt +
    answer fit the checkpoint's positions. The DICE answer re-emits prefix and suffix around the middle, so the
    answer budget is their tokens plus `middle_tokens`. Prompt None: even the reference alone does not fit."""
    limit = loaded.engine.config.max_position_embeddings
    for _ in range(8):
        prompt = build_infill_prompt(pytorch_code, prefix, suffix)
        answer_tokens = middle_tokens + len(loaded.tokenizer.encode(prefix + suffix)) + 16  # + the code fences
        if len(loaded.tokenizer.encode(prompt)) + answer_tokens <= limit:
            return prefix, suffix, prompt, answer_tokens
        if not prefix and not suffix:
            break
        prefix = prefix[len(prefix) // 2:].partition("\n")[2] if "\n" in prefix[len(prefix) // 2:] else ""
        suffix = suffix[: len(suffix) // 2].rpartition("\n")[0] + "\n" if "\n" in suffix[: len(suffix) // 2] else ""
    return prefix, suffix, None, 0


def build_kernel_prompt(pytorch_code: str) -> str:
    from dice_copilot.model.prompts import end_to_end_prompt

    return end_to_end_prompt(pytorch_code)


def infill_middle(prefix: str, suffix: str, model_output: str) -> str | None:
    """The text to insert at the cursor, recovered from the model's whole-file answer (None when it does not fit)."""
    from dice_copilot.model.prompts import splice_infill

    return splice_infill(prefix, suffix, model_output)


def generated_module(model_output: str) -> str | None:
    """The `ModelNew` module of a whole-kernel answer (its first code block)."""
    from dice_copilot.model.prompts import extract_first_code

    return extract_first_code(model_output)


def generate_texts(loaded: LoadedModel, request: GenerationRequest, cancel: threading.Event,
                   on_block: Callable[[int], None] | None = None) -> list[GeneratedText]:
    """Decode the request's candidates (blocking; run it on the engine thread): one greedily, several sampled at the
    decoding's temperature so that they differ."""
    scripted = _scripted_texts(request, cancel)
    if scripted is not None:
        return scripted
    d = request.decoding
    generations = loaded.engine.generate(
        [request.prompt], n=d.maxCandidates, strategy=d.strategy, threshold=d.threshold,
        max_new_tokens=request.max_new_tokens, temperature=0.0 if d.maxCandidates == 1 else d.temperature,
        top_k=d.topK, top_p=d.topP, steps_per_block=d.stepsPerBlock, seed=0,
        on_block=(lambda update: on_block(update.index)) if on_block else None, cancel=cancel)
    return [GeneratedText(g.text, g.finish_reason, g.stats.forward_passes, g.stats.generated_tokens,
                          g.stats.wall_time_s) for g in generations]


def _scripted_texts(request: GenerationRequest, cancel: threading.Event) -> list[GeneratedText] | None:
    """Test-only: answers from the JSON file named by DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS. Shape:
    `{"infill": [{"when": "text in prefix+suffix", "middles": [...], "delayS": 0}], "kernel": [{"when": "text in the
    module", "modules": [...], "delayS": 0}]}`; the first entry whose `when` matches answers, else the real engine."""
    path = os.environ.get(SCRIPTED_COMPLETIONS_ENV)
    if not path:
        return None
    script = json.loads(Path(path).read_text(encoding="utf-8"))
    haystack = request.prefix + request.suffix if request.kind == "infill" else request.pytorch_code
    for entry in script.get(request.kind, []):
        if entry.get("when", "") not in haystack:
            continue
        deadline = time.monotonic() + float(entry.get("delayS", 0))
        while time.monotonic() < deadline:
            if cancel.wait(0.01):
                return [GeneratedText("", "cancelled", 0, 0, 0.0)]
        if request.kind == "infill":
            texts = [f"```python\n{request.prefix}{middle}{request.suffix}\n```" for middle in entry["middles"]]
        else:
            texts = [f"```python\n{module}\n```" for module in entry["modules"]]
        return [GeneratedText(text, "stop", 0, 0, 0.0) for text in texts[: request.decoding.maxCandidates]]
    return None


# --------------------------------------------------------------------------------------------------------------------
# Validation (runs in the validation worker process; see validation_worker.py)


def import_validator():
    import dice_copilot.validator as validator

    return validator


def warm_validator(compile_config: dict | None = None) -> None:
    """Import the validator and start its pools ahead of the first request (the worker's startup ping)."""
    validator = import_validator()
    _pool(validator, compile_config or {}, compile_only=False)
    _pool(validator, compile_config or {}, compile_only=True)


def validation_request(candidate_sources: list[str], candidate_path: str | None, problem_source: str | None,
                       problem_path: str | None, class_name: str, settings) -> dict:
    """The JSON request the worker understands, built from the server settings: one or several candidates (versions
    of the same file) against one reference, the validator's Budget and CompileConfig as JSON, and the environment
    the worker process must run in (`worker_env`, see worker_environment)."""
    from dice_copilot.validator.api import Budget, compile_config_job
    from dice_copilot.validator.compile import CompileConfig, default_cache_dir

    validation, nvcc = settings.validation, settings.nvcc
    budget = Budget(atol=validation.atol, rtol=validation.rtol, timing=validation.timing,
                    total_timeout_s=validation.timeoutS, compile_timeout_s=validation.timeoutS)
    compile_config = CompileConfig(nvcc=str(Path(nvcc.path).expanduser()) if nvcc.path else CompileConfig.nvcc,
                                   arch=nvcc.arch, cache_dir=_cache_for_flags(default_cache_dir(), nvcc.flags))
    return {
        "candidates": [{"source": source, "path": candidate_path} for source in candidate_sources],
        "problem": None if problem_source is None else {"source": problem_source, "path": problem_path,
                                                        "class_name": class_name},
        "policy": validation.policy,
        "budget": asdict(budget),
        "compile_config": compile_config_job(compile_config),
        "worker_env": worker_environment(nvcc),
    }


def worker_environment(nvcc) -> dict[str, str]:
    """The environment variables the validation worker process starts with, from the nvcc settings. The toolkit is a
    property of the whole process: torch reads CUDA_HOME once, when torch.utils.cpp_extension is imported, and nvcc
    reads NVCC_APPEND_FLAGS on every run; so they are set when the worker starts (the server restarts the worker
    when they change), never written into a running process."""
    env = {}
    if nvcc.path:
        binary = Path(nvcc.path).expanduser().resolve()
        env["CUDA_HOME"] = str(binary.parent.parent)
        env["PATH"] = str(binary.parent) + os.pathsep + os.environ.get("PATH", "")
    if nvcc.flags:
        env["NVCC_APPEND_FLAGS"] = " ".join(nvcc.flags)
    return env


def _cache_for_flags(cache_dir: Path, flags: tuple[str, ...]) -> Path:
    """A build cache of their own for extra nvcc flags: they reach nvcc through NVCC_APPEND_FLAGS, which the cache
    keys do not see."""
    if not flags:
        return cache_dir
    return cache_dir / f"nvcc-flags-{hashlib.sha256(' '.join(flags).encode()).hexdigest()[:12]}"


_pools: dict[tuple, Any] = {}


def _pool(validator, compile_config: dict, compile_only: bool):
    """A warm ValidatorPool per CompileConfig (from its JSON form; fields left out are the defaults, so the startup
    ping's pools serve requests with default settings); `compile_only` pools have no GPU (used when there is no
    reference module to check against)."""
    from dice_copilot.validator.api import compile_config_job

    config = validator.CompileConfig(**compile_config)
    key = json.dumps(compile_config_job(config), sort_keys=True)
    if (key, compile_only) in _pools:
        return _pools[(key, compile_only)]
    for stale in [k for k in _pools if k[0] != key]:
        _pools.pop(stale).shutdown()
    pool = validator.ValidatorPool(gpus=[] if compile_only else None, compile_config=config)
    _pools[(key, compile_only)] = pool
    return pool


NO_REFERENCE = ("not run: no reference module (define the PyTorch `Model` and `get_inputs()` in this file or in a "
                "sibling `x.py`, or set diceCopilot.referenceModule)")


def run_validation(request: dict) -> list[dict]:
    """Validate the request's candidates together (compiles in parallel on every core while the GPU checks the first
    ones) and return their verdicts as JSON objects, in order. Without a reference module the candidates are
    compiled only, and the verdicts say so."""
    validator = import_validator()
    candidates: list = []  # a Candidate, or the Verdict of one that cannot be read (e.g. a splice broke the file)
    for candidate_spec in request["candidates"]:
        try:
            candidates.append(validator.Candidate.from_source(candidate_spec["source"],
                                                              path=candidate_spec.get("path")))
        except validator.InputError as error:
            candidates.append(validator.Verdict(failure=str(error), failure_code=FailureCode.BAD_INPUT))
    spec = request.get("problem")
    if spec:
        problem = validator.Problem.from_source(spec["source"], path=spec.get("path"),
                                                class_name=spec.get("class_name") or "Model")
    else:
        problem = validator.Problem("")
    # The request's dataclasses as JSON; absent ones are the dataclasses' defaults.
    pool = _pool(validator, request.get("compile_config", {}), compile_only=not spec)
    readable = [candidate for candidate in candidates if isinstance(candidate, validator.Candidate)]
    checked = iter(pool.validate_many([(problem, candidate) for candidate in readable],
                                      policy=request.get("policy", "ide"),
                                      budget=validator.Budget(**request.get("budget", {}))) if readable else [])
    verdicts = [next(checked) if isinstance(candidate, validator.Candidate) else candidate for candidate in candidates]
    encoded = [json.loads(verdict.to_json()) for verdict in verdicts]
    for verdict in encoded:
        if not spec and verdict.get("compile_only"):
            verdict["details"] = {**(verdict.get("details") or {}), "not_run": NO_REFERENCE}
    return encoded


@dataclass(frozen=True)
class VerdictSummary:
    """What the server needs from a verdict, read from its JSON form (validator/verdict.py: `stage` ran last,
    `failed_stage` did not pass, `outcome` passed / failed / not_checked)."""

    passed: bool
    stage: str | None
    compile_only: bool
    failure: str | None
    failure_code: str | None
    speedup: float | None
    max_abs_error: float | None
    diagnostics: tuple[dict, ...]
    not_run: str | None = None  # why a compile-only verdict ran nothing (no CUDA device, no reference, ...)
    failed_stage: str | None = None
    outcome: str | None = None  # None: a verdict without one (a worker failure, an accepted item's wire form)

    @classmethod
    def from_json(cls, verdict: dict) -> "VerdictSummary":
        """From the validator's JSON; a verdict this machine could not check has the fix in the editor's terms
        (settings, the server's Python) appended to its failure."""
        errors = verdict.get("max_abs_error")
        if isinstance(errors, (list, tuple)):
            numbers = [value for value in errors if isinstance(value, (int, float))]
            errors = max(numbers) if numbers else None
        failure = verdict.get("failure")
        fix = (verdict.get("details") or {}).get("environment", {}).get("fix_editor")
        if verdict.get("outcome") == Outcome.NOT_CHECKED and fix:
            failure = f"{failure}. Fix: {fix}"
        return cls(bool(verdict.get("passed")), verdict.get("stage"), bool(verdict.get("compile_only")), failure,
                   verdict.get("failure_code"), verdict.get("speedup"), errors,
                   tuple(verdict.get("diagnostics") or ()), (verdict.get("details") or {}).get("not_run"),
                   verdict.get("failed_stage"), verdict.get("outcome"))

    @classmethod
    def worker_failure(cls, message: str) -> "VerdictSummary":
        return cls(False, None, False, message, FailureCode.VALIDATOR_ERROR, None, None, (),
                   outcome=Outcome.NOT_CHECKED)

    @property
    def not_checked(self) -> bool:
        """This machine could not check the candidate (a missing toolkit piece, a validator fault)."""
        return self.outcome == Outcome.NOT_CHECKED

    @property
    def correct(self) -> bool:
        """Numerically checked against the reference (not just compiled)."""
        return self.passed and self.stage in (Stage.CORRECT, Stage.TIMED)

    def rank_key(self) -> tuple:
        """Sort key: correct first, then faster."""
        return (not self.correct, -(self.speedup or 0.0))

    def to_wire(self) -> dict:
        return {"passed": self.passed, "stage": self.stage, "failedStage": self.failed_stage,
                "outcome": self.outcome, "compileOnly": self.compile_only, "speedup": self.speedup,
                "maxAbsError": self.max_abs_error, "failure": self.failure, "failureCode": self.failure_code,
                "notRun": self.not_run}

    def describe(self) -> str:
        """One line for hovers and logs."""
        if self.not_checked:
            return f"? not checked here: {self.failure or self.failure_code}"
        if not self.passed:
            return f"✗ {self.failure or self.failure_code or 'failed'}"
        if self.compile_only:
            return f"✓ compiles ({self.not_run or 'not run: no CUDA device'})"
        parts = ["✓ correct" if self.correct else f"✓ {self.stage}"]
        if self.max_abs_error is not None:
            parts.append(f"max error {self.max_abs_error:.2e}")
        if self.speedup is not None:
            parts.append(f"{self.speedup:.2f}× vs torch")
        return ", ".join(parts)


def failure_reason(verdicts: list[VerdictSummary]) -> str:
    """The status reason when none of the verdicts passed: `notChecked` when this machine could not check one (no
    candidate can pass here until that is fixed; its failure says how), `compileError` when one did not compile, else
    `validationFailed`."""
    if any(verdict.not_checked for verdict in verdicts):
        return "notChecked"
    if any(verdict.failure_code == FailureCode.COMPILE_ERROR for verdict in verdicts):
        return "compileError"
    return "validationFailed"
