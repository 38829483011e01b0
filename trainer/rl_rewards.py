"""Execution rewards for RL: each completion becomes a candidate file, the strict validator gives its verdict, the
verdict its reward; and the group-normalised advantages (docs/decoding.md#bic-rl).

A reward function is any callable `f(tasks, completions) -> list[Reward]` (one per completion, in order);
`KernelReward` is the one the trainer uses. Infill answers are spliced into their task's own skeleton (the model's
copy of the prefix and suffix is discarded), so a policy cannot earn reward by rewriting the ModelNew around the
kernel it was asked for.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from dice_copilot.validator.api import Budget
from dice_copilot.validator.verdict import Outcome, Stage

from .rl_data import RLTask

# A speedup bonus's range in ln(speedup): at most 10x counts (past it, timing hacks are likelier than real wins).
SPEEDUP_BONUS_RANGE = (-1.0, math.log(10.0))


@dataclass
class Reward:
    value: float
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None
    # The verdict's one-line summary, or why no candidate could be built from the completion.
    summary: str = ""
    # The verdict says nothing about the kernel (this machine could not check it): counted apart, so that a broken
    # set-up is seen, and rewarded 0.
    setup_failure: bool = False


class RewardError(RuntimeError):
    """A reward that cannot be computed on this machine; the message says what to change."""


def candidate_source(task: RLTask, completion: str) -> str | None:
    """The file to validate: an e2e answer's first code block, or an infill answer's CUDA source placed between the
    task's own prefix and suffix. None when the answer has no code block / does not keep the skeleton's joins."""
    from dice_copilot.model.prompts import extract_first_code, splice_infill

    if not task.prefix and not task.suffix:
        return extract_first_code(completion)
    middle = splice_infill(task.prefix, task.suffix, completion)
    return None if middle is None else task.prefix + middle + task.suffix


def speedup_bonus(speedup: float | None) -> float:
    if speedup is None or not speedup > 0:
        return 0.0
    low, high = SPEEDUP_BONUS_RANGE
    return min(high, max(low, math.log(speedup)))


class KernelReward:
    """DICE's reward with the project's strict validator: 1 for a kernel that passes the static anti-cheat checks,
    compiles and matches the reference (`mode="correct"`, on the GPU), plus `speedup_weight` times the clipped
    log-speedup; `mode="compiles"` gives 1 for passing the checks and compiling (machines without a GPU)."""

    def __init__(self, mode: str = "correct", speedup_weight: float = 0.0, gpus: list[int] | None = None,
                 compile_timeout_s: float = Budget.compile_timeout_s, check_timeout_s: float = Budget.call_timeout_s,
                 compile_workers: int | None = None):
        from dice_copilot.validator import ValidatorPool

        if mode not in ("correct", "compiles"):
            raise ValueError(f"reward mode must be 'correct' or 'compiles', not {mode!r}")
        self.mode, self.speedup_weight = mode, speedup_weight
        self.pool = ValidatorPool(gpus=[] if mode == "compiles" else gpus, compile_workers=compile_workers)
        if mode == "correct" and not self.pool.has_gpu:
            self.pool.shutdown()
            raise RewardError("reward = 'correct' checks kernels on a CUDA GPU and this machine has none; run RL on "
                              "a GPU machine, or set reward = 'compiles' for a plumbing run (it rewards kernels "
                              "that compile, right or wrong)")
        self.budget = Budget(compile_timeout_s=compile_timeout_s, call_timeout_s=check_timeout_s,
                             timing=speedup_weight > 0)

    def __call__(self, tasks: Sequence[RLTask], completions: Sequence[str]) -> list[Reward]:
        rewards: list[Reward | None] = [None] * len(completions)
        items, where = [], []
        for i, (task, completion) in enumerate(zip(tasks, completions, strict=True)):
            source = candidate_source(task, completion)
            if source is None:
                why = "no code block in the answer" if not task.prefix else "the answer does not keep the skeleton"
                rewards[i] = Reward(0.0, summary=why)
            else:
                items.append((task.pytorch_code, source))
                where.append(i)
        for i, verdict in zip(where, self.pool.validate_many(items, policy="strict", budget=self.budget)):
            rewards[i] = self.reward_of(verdict)
        return rewards

    def reward_of(self, verdict) -> Reward:
        # A kernel that compiled and then failed on the GPU still compiled.
        compiled = verdict.cleared(Stage.COMPILE)
        setup_failure = verdict.outcome is Outcome.NOT_CHECKED
        if setup_failure:
            fix = verdict.details.get("environment", {}).get("fix_cli")
            print(f"rl: a verdict failed outside the kernel: {verdict.failure}" + (f"; fix: {fix}" if fix else ""),
                  file=sys.stderr)
        if self.mode == "compiles":
            # The validator passes a compile-only verdict only when every extension was built here.
            value = float(verdict.passed)
            return Reward(value, compiled=compiled, summary=verdict.summary(), setup_failure=setup_failure)
        correct = verdict.passed and not verdict.compile_only
        value = float(correct) * (1.0 + self.speedup_weight * speedup_bonus(verdict.speedup))
        return Reward(value, compiled=compiled, correct=correct, speedup=verdict.speedup, summary=verdict.summary(),
                      setup_failure=setup_failure)

    def close(self) -> None:
        self.pool.shutdown()


def group_advantages(values: Sequence[float], group_size: int) -> list[float]:
    """Each reward z-scored within its group of `group_size` consecutive responses (population std); a group whose
    rewards are all equal gets advantages 0 (it teaches nothing and is dropped by the trainer)."""
    if len(values) % group_size:
        raise ValueError(f"{len(values)} rewards do not split into groups of {group_size}")
    advantages = []
    for start in range(0, len(values), group_size):
        group = values[start:start + group_size]
        mean = sum(group) / group_size
        std = math.sqrt(sum((v - mean) ** 2 for v in group) / group_size)
        advantages += [0.0 if std < 1e-8 else (v - mean) / std for v in group]
    return advantages
