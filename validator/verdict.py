"""The result of validating one candidate: Verdict, its compiler Diagnostics and TimingStats, with a JSON round trip."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

STAGES = ("static", "compile", "correct", "timed")


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
    """What the validator concluded about one candidate; see the validator contract in the project docs."""

    stage: str | None = None
    passed: bool = False
    compile_only: bool = False
    failure: str | None = None
    failure_code: str | None = None
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

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(asdict(self), indent=indent)

    @classmethod
    def from_json(cls, text: str | dict) -> "Verdict":
        data = json.loads(text) if isinstance(text, str) else dict(text)
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
        else:
            text = "✗ " + self._failure_text()
        if self.flags:
            text += " [flags: " + ", ".join(self.flags) + "]"
        return text

    def _failure_text(self) -> str:
        reason = self.failure or "failed"
        if self.failure_code == "compile_error":
            first_error = next((d for d in self.diagnostics if d.severity == "error"), None)
            if first_error is not None:
                where = f" at line {first_error.line}" if first_error.line else ""
                return f"compile error{where}: {first_error.message}"
        return reason
