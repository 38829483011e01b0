"""`dice-copilot eval kernelbench`: score a checkpoint on a level of the user's KernelBench checkout."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from dice_copilot.cli import positive_int
from dice_copilot.model.decoding import DEFAULT_STRATEGY, DEFAULT_THRESHOLD, STRATEGIES
from dice_copilot.validator.kernelbench_eval import (
    FAST_P_THRESHOLDS,
    EvalConfig,
    GenerationSettings,
    KernelBenchLayoutError,
    claim_out_dir,
    list_level_problems,
    parse_problem_ids,
    run_kernelbench_eval,
)

DEFAULT_SAMPLING_TEMPERATURE = 0.8


def register(subparsers) -> None:
    eval_parser = subparsers.add_parser("eval", help="score a checkpoint on a kernel benchmark")
    benchmarks = eval_parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    eval_parser.set_defaults(run=lambda args: _print_help(eval_parser))

    kb = benchmarks.add_parser(
        "kernelbench",
        help="generate, validate (strict) and score one KernelBench level",
        description="Generate a ModelNew for each problem of a KernelBench level with the DICE engine, validate it "
                    "in strict mode and report compile rate, correct rate, fast_p and geometric-mean speedup. "
                    "Re-running with the same --out resumes where the last run stopped.")
    kb.add_argument("dir", type=Path, help="your KernelBench checkout (holding KernelBench/level{N}/)")
    kb.add_argument("--level", type=int, required=True, help="level number (1, 2, 3, ...)")
    kb.add_argument("--checkpoint", required=True, help="checkpoint directory or name ('default' for the embedded one)")
    kb.add_argument("--problems", default=None, help="problem ids to run, e.g. 1-20,25 (default: the whole level)")
    kb.add_argument("--samples", type=positive_int, default=1, help="candidates per problem; sample 0 is scored")
    kb.add_argument("--out", type=Path, default=None,
                    help="output folder (default: runs/kernelbench-level{N}-{checkpoint name})")
    kb.add_argument("--device", default=None, help="device for the model (default: cuda when present, else cpu)")
    kb.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY, help="decoding strategy")
    kb.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                    help="dynamic strategy: commit every token whose confidence exceeds this")
    kb.add_argument("--max-new-tokens", type=positive_int, default=2048, help="most tokens to generate per candidate")
    kb.add_argument("--temperature", type=float, default=None,
                    help=f"sampling temperature (default: 0 for one sample, {DEFAULT_SAMPLING_TEMPERATURE} for "
                         "several)")
    kb.add_argument("--seed", type=int, default=0, help="sampling seed")
    kb.add_argument("--no-progress", action="store_true", help="no progress bar")
    kb.add_argument("--no-plot", action="store_true", help="skip the speedup plot (speedup.png)")
    kb.set_defaults(run=run_kernelbench)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def run_kernelbench(args: argparse.Namespace) -> int:
    try:
        problem_ids = parse_problem_ids(args.problems) if args.problems else None
        list_level_problems(args.dir, args.level)
    except (ValueError, KernelBenchLayoutError) as error:
        return _fail(str(error))
    temperature = args.temperature
    if temperature is None:
        temperature = 0.0 if args.samples == 1 else DEFAULT_SAMPLING_TEMPERATURE
    if args.samples > 1 and temperature == 0.0:
        return _fail("--samples > 1 with --temperature 0 gives identical samples; set a temperature above 0")
    settings = GenerationSettings(strategy=args.strategy, threshold=args.threshold, max_new_tokens=args.max_new_tokens,
                                  temperature=temperature, seed=args.seed)
    checkpoint_name = Path(str(args.checkpoint)).name or "checkpoint"
    out_dir = args.out or Path("runs") / f"kernelbench-level{args.level}-{checkpoint_name}"
    config = EvalConfig(kernelbench_dir=args.dir, level=args.level, out_dir=out_dir, problem_ids=problem_ids,
                        samples=args.samples, checkpoint=str(args.checkpoint), settings=asdict(settings),
                        plot=not args.no_plot)

    try:
        config.out_dir.mkdir(parents=True, exist_ok=True)
        claim_out_dir(config)  # before the slow model load: refuse to mix results of different runs
    except (OSError, KernelBenchLayoutError) as error:
        return _fail(str(error))

    from dice_copilot.model import CheckpointError
    from dice_copilot.validator.kernelbench_eval import EngineGenerator

    try:
        generator = EngineGenerator(None if args.checkpoint == "default" else args.checkpoint, device=args.device,
                                    settings=settings)
    except CheckpointError as error:
        return _fail(f"cannot load checkpoint {args.checkpoint}: {error}")
    report = run_kernelbench_eval(config, generator, progress=not args.no_progress)
    score = report.level_score
    fast = ", ".join(f"fast_{p:g} {100 * score.fast_p[f'fast_{p:g}']:.1f}%" for p in FAST_P_THRESHOLDS)
    geomean = "n/a" if score.geomean_speedup is None else f"{score.geomean_speedup:.2f}x"
    print(f"level {score.level}: {score.num_evaluated}/{score.num_problems} problems, "
          f"compile {100 * score.compile_rate:.1f}%, correct {100 * score.correct_rate:.1f}%, {fast}, "
          f"geomean speedup {geomean}")
    if score.compile_only:
        print("note: no CUDA device here, so candidates were only compiled (correctness and speed not run)")
    written = [report.report_markdown, report.report_json] + ([report.plot] if report.plot else [])
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
