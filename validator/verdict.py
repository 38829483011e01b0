"""The validator's contract with everything that reads its verdicts (the CLI, the server, RL rewards, CuKe, the
KernelBench eval): `Verdict` with its compiler `Diagnostic`s and `TimingStats`, the `Stage`, `FailureCode` and
`Outcome` string enums, the JSON round trip, and `ValidatorError`, the base of the validator's exceptions.

The stages run in order: static checks -> compile -> correct (the checks on the device) -> timed. `stage` is the
stage that ran last, `failed_stage` the one that did not pass (None when the verdict passed); a verdict that passed
and is `compile_only` ran no device stage. `outcome` says whose fault a failure is: `failed` (the candidate's) or
`not_checked` (this machine could not check it: a missing toolkit piece, a validator fault). A verdict that needs
a piece this machine lacks has `details["environment"]`: what is missing (`needs`, `missing`, `included_by`, ...),
the facts (`message`) and the fix, for the command line (`fix_cli`) and for the editor (`fix_editor`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum


class _StrEnum(str, Enum):
    """A str subclass, so it is equal to its value, hashes like it and is written to JSON as that string."""

    def __str__(self) -> str:
        return self.value


class Stage(_StrEnum):
    STATIC = "static"
    COMPILE = "compile"
    CORRECT = "correct"  # imports the candidate, then the correctness checks (and kernel attribution in strict)
    TIMED = "timed"


STAGES = tuple(Stage)


class FailureCode(_StrEnum):
    BAD_INPUT = "bad_input"  # the candidate or problem cannot be read
    STATIC = "static"  # an anti-cheat rule rejected the source
    COMPILE_ERROR = "compile_error"
    ENVIRONMENT = "environment"  # this machine lacks a piece the candidate needs (toolkit headers, a CUDA torch, nvcc)
    TIMEOUT = "timeout"
    CRASH = "crash"  # the worker process died or its CUDA context broke
    RUNTIME_ERROR = "runtime_error"
    INCORRECT = "incorrect"
    CHEAT = "cheat"
    VALIDATOR_ERROR = "validator_error"  # a fault of the validator itself
    # Inside a worker only: the pool judges the candidate again in a fresh process.
    STALE_EXTENSION = "stale_extension"  # a module name the worker imported from another build
    WORKER_EXHAUSTED = "worker_exhausted"  # no pthread keys left in the worker
    # KernelBench eval records only: there was no candidate to validate.
    GENERATION_ERROR = "generation_error"
    NO_CODE = "no_code"


# Failures that say nothing about the candidate: the machine (or the validator) could not check it.
NOT_CHECKED_FAILURES = (FailureCode.ENVIRONMENT, FailureCode.VALIDATOR_ERROR)


class Outcome(_StrEnum):
    PASSED = "passed"  # every stage that can run here passed (`compile_only`: no device stage ran)
    FAILED = "failed"  # the candidate failed a stage
    NOT_CHECKED = "not_checked"  # this machine could not check the candidate (see NOT_CHECKED_FAILURES)


class ValidatorError(Exception):
    """Base of the validator's exceptions (bad input, a worker that stopped answering, a compile timeout...)."""


@dataclass
class Diagnostic:
    """One compiler or static-check message, mapped to a line of the candidate file (1-based; None when unknown)."""

    line: int | None
    column: int | None
    severity: str  # "error" | "warning" | "note" | "flag"
    message: str
    file: str | None = None


@dataclass
class TimingStats:
    """Per-call GPU times in milliseconds over `n` timed calls."""

    median_ms: float
    mean_ms: float
    std_ms: float
    n: int
    min_ms: float = 0.0
    max_ms: float = 0.0


@dataclass
class Verdict:
    """What the validator concluded about one candidate (the stages and outcomes are described above)."""

    stage: Stage | None = None  # the stage that ran last; None: none ran (bad input)
    passed: bool = False
    compile_only: bool = False
    failure: str | None = None
    failure_code: FailureCode | None = None
    stage_times: dict[str, float] = field(default_factory=dict)
    compiler_log: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    max_abs_error: list[float] = field(default_factory=list)
    max_rel_error: list[float] = field(default_factory=list)
    speedup: float | None = None
    timing: dict[str, TimingStats] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    cached_build: bool = False
    details: dict = field(default_factory=dict)
    failed_stage: Stage | None = None  # the stage that did not pass; None when the verdict passed

    def __post_init__(self):
        self.stage = None if self.stage is None else Stage(self.stage)
        self.failed_stage = None if self.failed_stage is None else Stage(self.failed_stage)
        self.failure_code = None if self.failure_code is None else FailureCode(self.failure_code)

    @property
    def outcome(self) -> Outcome:
        if self.passed:
            return Outcome.PASSED
        return Outcome.NOT_CHECKED if self.failure_code in NOT_CHECKED_FAILURES else Outcome.FAILED

    def cleared(self, stage: Stage) -> bool:
        """Whether `stage` ran and passed (a kernel that compiled and then failed on the GPU cleared `compile`)."""
        if self.stage is None:
            return False
        order = STAGES.index(Stage(stage)) - STAGES.index(self.stage)
        return order < 0 or order == 0 and self.failed_stage is None

    def fail(self, stage: Stage, code: FailureCode, message: str) -> None:
        """Record that `stage` did not pass."""
        self.passed, self.stage, self.failed_stage = False, stage, stage
        self.failure_code, self.failure = code, message

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({**asdict(self), "outcome": self.outcome}, indent=indent)

    @classmethod
    def from_json(cls, text: str | dict) -> "Verdict":
        """A verdict from `to_json`'s text (or its dict), also one written before `failed_stage` existed."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        if "failed_stage" not in data:
            data.update(_stages_of_old_json(data))
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["diagnostics"] = [Diagnostic(**d) for d in data.get("diagnostics", [])]
        data["timing"] = {k: TimingStats(**v) for k, v in data.get("timing", {}).items()}
        return cls(**data)

    def summary(self) -> str:
        """One line a user reads in the editor status bar or the terminal."""
        if self.passed:
            if self.compile_only:
                reason = self.details.get("not_run", "not run: no CUDA device")
                text = f"✓ compiles (correctness and speed {reason})"
            elif self.speedup is not None:
                n = self.timing.get("candidate").n if "candidate" in self.timing else 0
                text = f"✓ correct, {self.speedup:.2f}× vs torch (median of {n})"
            else:
                text = "✓ correct (timing not run)"
        elif self.outcome is Outcome.NOT_CHECKED:
            where = f" ({self.stage} stage)" if self.stage else ""
            text = f"? not checked{where}: {self.failure or 'this machine cannot check the candidate'}"
        else:
            text = "✗ " + self._failure_text()
        if self.flags:
            text += " [flags: " + ", ".join(self.flags) + "]"
        return text

    def _failure_text(self) -> str:
        reason = self.failure or "failed"
        if self.failure_code is FailureCode.COMPILE_ERROR:
            first_error = next((d for d in self.diagnostics if d.severity == "error"), None)
            if first_error is not None:
                where = f" at line {first_error.line}" if first_error.line else ""
                return f"compile error{where}: {first_error.message}"
        return reason


def _stages_of_old_json(data: dict) -> dict:
    """Before `failed_stage`, `stage` was the last stage passed: a failed verdict stopped at the stage after it."""
    if data.get("passed") or data.get("failure_code") in (None, FailureCode.BAD_INPUT):
        return {"failed_stage": None}
    stage = data.get("stage")
    stopped = STAGES[0] if stage is None else STAGES[min(STAGES.index(Stage(stage)) + 1, len(STAGES) - 1)]
    return {"stage": stopped, "failed_stage": stopped}
