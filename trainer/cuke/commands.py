"""`dice-copilot train cuke build`: the CuKe dataset pipeline from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes i/n (e.g. 0/4), not {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text}: need 0 <= i < n")
    return index, count


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def register_train(train_subparsers) -> None:
    """Add `train cuke` with its `build` subcommand."""
    cuke = train_subparsers.add_parser("cuke", help="CuKe dataset: validated, speedup-filtered PyTorch->CUDA pairs")
    sub = cuke.add_subparsers(dest="cuke_command", metavar="ACTION")
    cuke.set_defaults(run=lambda args: (cuke.print_help(), 2)[1])
    build = sub.add_parser("build", help="validate pairs and write the SFT / infilling / end-to-end / held-out sets",
                           description="Build the CuKe sets: dedup, decontaminate, validate every pair with the strict "
                                       "validator, keep correct pairs at least --min-speedup faster than eager "
                                       "PyTorch, and write JSONL task sets plus stats.json / stats.md.")
    build.add_argument("--out", required=True, type=Path, help="output folder (results/ inside makes reruns resume)")
    build.add_argument("--source", default="builtin",
                       help="'builtin' (the seed library) or a JSONL file with pytorch_code and cuda_code per line")
    build.add_argument("--min-speedup", type=float, default=2.0,
                       help="keep pairs at least this much faster than eager PyTorch")
    build.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                       help="validate shard I of N (default: 0/1)")
    build.add_argument("--limit", type=int, default=None, metavar="N",
                       help="validate at most N pairs of this shard (default: all)")
    build.add_argument("--compile-only", action="store_true",
                       help="no GPU stage: compile-check only; results are labelled unverified, no training sets")
    build.add_argument("--decontaminate", type=Path, default=None,
                       help="benchmark checkout (e.g. KernelBench) to measure n-gram overlap against (default: none)")
    build.add_argument("--decontam-threshold", type=float, default=0.5,
                       help="exclude pairs sharing at least this share of their n-grams with the benchmark")
    build.add_argument("--dedup-threshold", type=float, default=0.9,
                       help="near-duplicates (problem and kernel both at least this similar) keep only the first")
    build.add_argument("--generators", type=_names, default=None,
                       help="built-in generators to use, comma-separated (default: all)")
    build.add_argument("--scale", type=float, default=1.0, help="built-in source: multiply each generator's pair count")
    build.add_argument("--seed", type=int, default=0, help="built-in source: generation seed")
    build.add_argument("--heldout-families", type=_names, default=None,
                       help="families to hold out for evaluation (default: chosen among rare families)")
    build.add_argument("--timing-trials", type=int, default=100, help="timed calls per model")
    build.add_argument("--max-seconds", type=float, default=None,
                       help="stop starting new validations this many seconds after the build started; "
                            "rerun to resume (default: no limit)")
    build.add_argument("--no-validation", action="store_true",
                       help="validate nothing: write the sets and the report from the GPU verdicts already in "
                            "OUT/results (no GPU needed)")
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    build.set_defaults(run=run_build_command)


def run_build_command(args) -> int:
    from .pipeline import BuildConfig, run_build
    from .records import SourceError
    from .seeds import generator_names

    if args.generators and set(args.generators) - set(generator_names()):
        unknown = ", ".join(sorted(set(args.generators) - set(generator_names())))
        print(f"error: unknown generator(s) {unknown}; choose from {', '.join(generator_names())}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 0:
        print("error: --limit must be >= 0", file=sys.stderr)
        return 2
    if args.compile_only and args.no_validation:
        print("error: --compile-only and --no-validation exclude each other (the first validates on the CPU, the "
              "second not at all)", file=sys.stderr)
        return 2
    config = BuildConfig(out=args.out, source=args.source, min_speedup=args.min_speedup, shard_index=args.shard[0],
                         shard_count=args.shard[1], limit=args.limit, compile_only=args.compile_only,
                         decontaminate=args.decontaminate, decontam_threshold=args.decontam_threshold,
                         dedup_threshold=args.dedup_threshold,
                         generators=args.generators, scale=args.scale, seed=args.seed,
                         heldout_families=args.heldout_families, timing_trials=args.timing_trials,
                         max_seconds=args.max_seconds, validate=not args.no_validation,
                         progress=not args.no_progress)
    if args.compile_only:
        print("compile-only build: no GPU stage, so correctness and the speedup filter are NOT applied; compiled "
              "pairs go to compile_only_unverified/ and no training sets are written", file=sys.stderr)
    try:
        stats = run_build(config)
    except (SourceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/stats.md: " + ", ".join(f"{k} {v}" for k, v in stats["status"].items()))
    for name, count in stats["datasets"].items():
        if isinstance(count, int):
            print(f"  {name}: {count}")
    return 0
