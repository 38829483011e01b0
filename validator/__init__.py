"""Kernel verdicts: static anti-cheat checks, compilation, correctness and timing in isolated workers."""

from .api import Budget, ValidatorPool, validate
from .problem import Candidate, InputError, Problem
from .verdict import Diagnostic, TimingStats, Verdict

__all__ = ["Budget", "Candidate", "Diagnostic", "InputError", "Problem", "TimingStats", "ValidatorPool", "Verdict",
           "validate"]
