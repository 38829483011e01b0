"""`dice-copilot validate`: one candidate against one reference, verdict printed (or JSON), exit code 0/1/2/3."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .api import Budget, ValidatorPool
from .problem import Candidate, InputError, Problem
from .static_checks import POLICIES
from .verdict import Outcome

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CHECKED = 0, 1, 2, 3
EXIT_CODES = {Outcome.PASSED: EXIT_PASSED, Outcome.FAILED: EXIT_FAILED, Outcome.NOT_CHECKED: EXIT_NOT_CHECKED}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="compile, check and time a candidate kernel against a PyTorch reference",
        description="Exit code 0 when the candidate passes every stage that can run on this machine, 1 when it "
                    "fails one, 2 for bad usage or unreadable input, 3 when this machine cannot check it (a missing "
                    "piece of the machine, named with its fix, or a fault of the validator).")
    parser.add_argument("candidate", type=Path, help="ModelNew module (.py) or a .cu file")
    parser.add_argument("--reference", "-r", type=Path, required=True,
                        help="PyTorch reference module with Model, get_inputs(), get_init_inputs()")
    parser.add_argument("--policy", choices=POLICIES, default="ide",
                        help="ide: the editor's checks, PyTorch glue and libraries allowed (cuBLAS/cuDNN calls "
                             "flagged); strict: for benchmarks and rewards, a custom __global__/Triton kernel "
                             "launched from forward must do most of the GPU time, no PyTorch/ATen/cuBLAS compute")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--no-timing", action="store_true", help="stop after correctness")
    parser.add_argument("--class-name", default="Model", help="reference class name")
    parser.add_argument("--compile-timeout", type=float, default=Budget.compile_timeout_s, metavar="SECONDS",
                        help="time limit of each extension build")
    parser.set_defaults(run=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    try:
        problem = Problem.from_file(args.reference, class_name=args.class_name)
        candidate = Candidate.from_file(args.candidate)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    budget = Budget(timing=not args.no_timing, compile_timeout_s=args.compile_timeout)
    with ValidatorPool(warm=False) as pool:
        verdict = pool.validate(problem, candidate, args.policy, budget)
    if args.json:
        print(verdict.to_json(indent=2))
    else:
        print(verdict.summary())
        if fix := verdict.details.get("environment", {}).get("fix_cli"):
            print(f"  fix: {fix}")
        for d in verdict.diagnostics:
            where = f"{d.file or args.candidate}:{d.line}" if d.line else str(d.file or args.candidate)
            print(f"  {where}: {d.severity}: {d.message}")
    return EXIT_CODES[verdict.outcome]
