"""Kernel verdicts: static anti-cheat checks, compilation, correctness and timing in isolated workers."""

from .api import Budget, ValidatorPool, validate
from .compile import CompileConfig
from .problem import Candidate, InputError, Problem
from .verdict import Diagnostic, FailureCode, Outcome, Stage, TimingStats, ValidatorError, Verdict
from .worker import WorkerError

__all__ = ["Budget", "Candidate", "CompileConfig", "Diagnostic", "FailureCode", "InputError", "Outcome", "Problem", "Stage",
           "TimingStats", "ValidatorError", "ValidatorPool", "Verdict", "WorkerError", "validate"]
