"""`dice-copilot eval kernelbench`: score a checkpoint on a level of the user's KernelBench checkout."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from dice_copilot.cli import positive_int
from dice_copilot.model.decoding import (DEFAULT_SAMPLING_TEMPERATURE, DEFAULT_STRATEGY, DEFAULT_THRESHOLD,
                                        STRATEGIES, choose_decoding)
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
    kb.add_argument("--strategy", choices=STRATEGIES,
                    help=f"decoding strategy (default: the checkpoint's generation_config.json, else "
                         f"{DEFAULT_STRATEGY})")
    kb.add_argument("--threshold", type=float,
                    help="dynamic strategy: commit every token whose confidence exceeds this (default: the "
                         f"checkpoint's, else {DEFAULT_THRESHOLD})")
    kb.add_argument("--max-new-tokens", type=positive_int,
                    help="most tokens to generate per candidate (default: the checkpoint's, else "
                         f"{GenerationSettings.max_new_tokens})")
    kb.add_argument("--temperature", type=float, default=None,
                    help="sampling temperature (default: 0 for one sample; for several, the checkpoint's, else "
                         f"{DEFAULT_SAMPLING_TEMPERATURE})")
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

    from dice_copilot.model import CheckpointError
    from dice_copilot.model.checkpoint import read_decoding_defaults

    try:
        settings = generation_settings(args, read_decoding_defaults(args.checkpoint))
    except CheckpointError as error:
        return _fail(f"cannot load checkpoint {args.checkpoint}: {error}")
    if args.samples > 1 and settings.temperature == 0.0:
        return _fail("--samples > 1 at temperature 0 (from --temperature or the checkpoint's generation_config.json) "
                     "gives identical samples; set --temperature above 0")
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


def generation_settings(args: argparse.Namespace, checkpoint_defaults: dict) -> GenerationSettings:
    """The decoding the flags ask for, else the checkpoint's decoding defaults, else the built-ins, as `generate`
    picks them (model/decoding.py: choose_decoding). One sample is greedy unless --temperature says otherwise: a
    checkpoint's temperature is that of several candidates. --samples is how the benchmark is scored, not a decoding
    default, so the checkpoint's num_return_sequences does not set it."""
    temperature = 0.0 if args.temperature is None and args.samples == 1 else args.temperature
    given = {"strategy": args.strategy, "threshold": args.threshold, "max_new_tokens": args.max_new_tokens,
             "temperature": temperature, "seed": args.seed}
    built_in = asdict(GenerationSettings(temperature=DEFAULT_SAMPLING_TEMPERATURE))
    chosen = choose_decoding(given, checkpoint_defaults, built_in)
    return GenerationSettings(**{key: choice.value for key, choice in chosen.items()})
