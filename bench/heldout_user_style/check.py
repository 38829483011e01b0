"""Validates the held-out user-style set's own solutions (README.md): every NN_name/solution.py against its
problem.py under the strict policy, all through one ValidatorPool, and prints one table row per problem.

    python bench/heldout_user_style/check.py                      # every problem, correctness only
    python bench/heldout_user_style/check.py 07 36_int8 --timing  # problems whose names start so, with speed
    python bench/heldout_user_style/check.py --json verdicts.json --max-seconds 540

On a machine without a CUDA device the verdicts stop after the static checks and the compile stage, and the table
says so. Exit code 0 when every verdict passed, 1 otherwise (including problems not reached before --max-seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

from dice_copilot.validator import Budget, ValidatorPool, Verdict

SET = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefixes", nargs="*", help="check only problems whose folder names start with these")
    parser.add_argument("--timing", action="store_true", help="also measure the speedup against the reference")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop waiting after this long; problems not reached are reported as such")
    parser.add_argument("--json", type=Path, default=None, help="write every verdict (Verdict.to_json) here")
    args = parser.parse_args(argv)

    problems = selected_problems(args.prefixes)
    if not problems:
        print(f"no problem in {SET} starts with {' or '.join(args.prefixes)}", file=sys.stderr)
        return 2
    give_up_at = None if args.max_seconds is None else time.perf_counter() + args.max_seconds
    verdicts = validate_set(problems, timing=args.timing, give_up_at=give_up_at, on_start=print)
    rows = [table_row(p, verdicts.get(i)) for i, p in enumerate(problems)]
    print_table(rows)
    passed = sum(1 for v in verdicts.values() if v.passed)
    print(f"\n{passed}/{len(problems)} passed" + ("" if len(verdicts) == len(problems)
                                                 else f", {len(problems) - len(verdicts)} not reached"))
    if args.json:
        by_name = {problems[i]["name"]: json.loads(verdicts[i].to_json()) for i in sorted(verdicts)}
        args.json.write_text(json.dumps(by_name, indent=1))
    return 0 if passed == len(problems) else 1


def validate_set(problems: list[dict], timing: bool = False, give_up_at: float | None = None,
                 on_start=lambda line: None) -> dict[int, Verdict]:
    """Strict verdicts of the problems' solutions by index in `problems` (those finished before `give_up_at`, a
    time.perf_counter() value). on_start receives the line saying what the verdicts will cover on this machine."""
    budget = Budget(timing=timing, call_timeout_s=30, compile_timeout_s=300)
    items = [(SET / p["name"] / "problem.py", SET / p["name"] / "solution.py") for p in problems]
    with ValidatorPool() as pool:
        on_start(mode_line(pool, timing))
        return dict(pool.validate_iter(items, policy="strict", budget=budget, give_up_at=give_up_at))


def selected_problems(prefixes: list[str]) -> list[dict]:
    problems = tomllib.loads((SET / "manifest.toml").read_text())["problem"]
    return [p for p in problems if not prefixes or any(p["name"].startswith(x) for x in prefixes)]


def mode_line(pool: ValidatorPool, timing: bool) -> str:
    if not pool.has_gpu:
        return ("compile-only: no CUDA device here, so each verdict covers the static checks and the compile stage; "
                "correctness and speed are not run")
    import torch

    return (f"GPU: {torch.cuda.get_device_name(0)} x{len(pool.gpus)}; strict policy, correctness"
            + (" and timing" if timing else " (no timing: pass --timing for speedups)"))


def table_row(problem: dict, verdict) -> list[str]:
    kernels = str(len(problem["kernels"]))
    if verdict is None:
        return [problem["name"], problem["dtype"], kernels, "not reached", "", "", ""]
    if verdict.passed:
        result = "compiles" if verdict.compile_only else "passed"
    else:
        result = f"{verdict.outcome}: {verdict.failure_code}"
    error = f"{max(verdict.max_abs_error):.2e}" if verdict.max_abs_error else ""
    speedup = f"{verdict.speedup:.2f}x" if verdict.speedup is not None else ""
    note = ", ".join(verdict.flags) if verdict.passed else (verdict.failure or "").splitlines()[0][:100]
    return [problem["name"], problem["dtype"], kernels, result, error, speedup, note]


def print_table(rows: list[list[str]]) -> None:
    header = ["problem", "dtype", "kernels", "verdict", "max abs err", "speedup", "flags / failure"]
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
