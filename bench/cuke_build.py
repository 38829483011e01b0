"""Build the built-in CuKe corpus on the GPU machine and report how many pairs pass at speedup >= 1.0 / 1.5 / 2.0
per level, and the build throughput in pairs per GPU-minute, against the targets (6,000 pairs, 200 per GPU-minute).

Resumable: results live in --work; run it again (e.g. under a 10-minute command limit with --max-seconds 500) and it
continues where it stopped. Across machines (a GPU session starts bare), --progress names the verdicts of earlier
runs (bench/cuke_progress.jsonl.xz, committed): they are restored first, and all verdicts so far are written next
to --out as cuke_progress.jsonl.xz, to commit in its place. Examples:
    python bench/cuke_build.py --work /tmp/cuke_work --out $OUT/cuke_build.json --limit 600 --max-seconds 480
    python bench/cuke_build.py --out $OUT/cuke_build.json --scale 2.5 --progress bench/cuke_progress.jsonl.xz
The training sets of the committed verdicts, on any machine (validating nothing):
    python bench/cuke_build.py --work cuke --out cuke/build.json --scale 2.5 --progress bench/cuke_progress.jsonl.xz \
        --no-validation
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
import time
from pathlib import Path

TARGET_PAIRS = 6000
TARGET_PER_GPU_MINUTE = 200.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="JSON file for the results")
    parser.add_argument("--work", type=Path, default=Path("/tmp/cuke_work"), help="build folder (kept for resuming)")
    parser.add_argument("--min-speedup", type=float, default=2.0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every generator's pair count")
    parser.add_argument("--limit", type=int, default=None, help="validate at most this many pairs")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop starting new validations this long after the build started")
    parser.add_argument("--timing-trials", type=int, default=50)
    parser.add_argument("--decontaminate", type=Path, default=None, help="a KernelBench checkout, if present")
    parser.add_argument("--progress", type=Path, default=None, help="verdicts of earlier runs to restore (.jsonl.xz)")
    parser.add_argument("--no-validation", action="store_true",
                        help="validate nothing: the sets and the report from the restored verdicts (no GPU needed)")
    parser.add_argument("--export-only", action="store_true",
                        help="only write the verdicts in --work so far next to --out (after a run that was cut off)")
    args = parser.parse_args(argv)
    if args.export_only:
        export_progress(args.work, args.out.parent / "cuke_progress.jsonl.xz")
        return 0

    import torch
    from dice_copilot.trainer.cuke.pipeline import BuildConfig, run_build

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    if gpu == "none" and not args.no_validation:
        print("no CUDA device: this benchmark measures GPU validation; run it on the GPU machine", file=sys.stderr)
    if args.progress is not None and args.progress.exists():  # named as ResultStore finds a shard's verdicts
        restored = args.work / "results" / "gpu-shard-restored.jsonl"
        restored.parent.mkdir(parents=True, exist_ok=True)
        restored.write_bytes(lzma.decompress(args.progress.read_bytes()))
    config = BuildConfig(out=args.work, min_speedup=args.min_speedup, scale=args.scale, limit=args.limit,
                         max_seconds=args.max_seconds, timing_trials=args.timing_trials,
                         decontaminate=args.decontaminate, compile_only=gpu == "none" and not args.no_validation,
                         validate=not args.no_validation)
    started = time.perf_counter()
    stats = run_build(config)
    wall = time.perf_counter() - started

    run = stats["run"]
    table = stats["speedup_pass_counts"]
    per_level = stats["per_level"]
    validated_total = sum(v for k, v in stats["status"].items() if k not in ("pending", "duplicate", "contaminated"))
    kept = stats["status"].get("kept", 0)
    print(f"\nCuKe built-in corpus on {gpu}: {stats['total_pairs']} generated, "
          f"{stats['status'].get('duplicate', 0)} duplicates, {validated_total} validated so far, "
          f"{stats['status'].get('pending', 0)} still pending")
    print("\n| level | pairs (after dedup) | correct+timed | >=1.0x | >=1.5x | >=2.0x |")
    print("|---|---|---|---|---|---|")
    for level in sorted(per_level):
        row = table.get(level, {})
        after = per_level[level].get("total", 0) - per_level[level].get("duplicate", 0)
        print(f"| {level} | {after} | {row.get('correct_timed', 0)} | {row.get('>=1.0', 0)} | {row.get('>=1.5', 0)} | "
              f"{row.get('>=2.0', 0)} |")
    per_gpu_min = run.get("pairs_per_gpu_minute")
    print("\n| metric | ours | target | ratio |")
    print("|---|---|---|---|")
    print(f"| pairs kept (>= {args.min_speedup}x) | {kept} | {TARGET_PAIRS} | {kept / TARGET_PAIRS:.2f} |")
    if per_gpu_min:
        print(f"| pairs validated per GPU-minute | {per_gpu_min} | {TARGET_PER_GPU_MINUTE:.0f} | "
              f"{per_gpu_min / TARGET_PER_GPU_MINUTE:.2f} |")
    pending = stats["status"].get("pending", 0)
    if run.get("pairs_per_minute") and pending:
        print(f"\n{pending} pairs not yet validated: about {pending / run['pairs_per_minute']:.0f} more minutes at "
              f"this run's rate ({run['pairs_per_minute']} pairs/min on {run['gpus']} GPU(s))")
    stages = run.get("stage_seconds_per_pair") or {}
    if stages:
        # stages overlap (compiles run on every core while the GPU checks earlier pairs); "gpu" is a worker's time
        print("\nmean seconds per validated pair, by verdict stage: "
              + ", ".join(f"{stage} {seconds}" for stage, seconds in stages.items())
              + f"; worker processes replaced: {run.get('worker_replacements', 0)}; one-time header setup "
                f"{run.get('setup_seconds', 0)} s (not counted in the rate)")
    print(f"\nrejection reasons: {json.dumps(stats['rejection_reasons'])}")
    result = {"gpu": gpu, "wall_seconds": round(wall, 1), "stats": stats,
              "targets": {"pairs": TARGET_PAIRS, "pairs_per_gpu_minute": TARGET_PER_GPU_MINUTE}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    for name in ("stats.md", "speedup_hist.png"):
        if (args.work / name).exists():
            shutil.copy(args.work / name, args.out.parent / f"cuke_{name}")
    export_progress(args.work, args.out.parent / "cuke_progress.jsonl.xz")
    return 0


def export_progress(work: Path, path: Path) -> None:
    """Every verdict so far as one file: what a later run on a fresh machine resumes from (--progress)."""
    from dice_copilot.trainer.cuke.pipeline import ResultStore

    rows = ResultStore(work, 0, 1, "gpu").load_all().values()
    path.parent.mkdir(parents=True, exist_ok=True)
    # xz, not gzip: the timings' digits compress ~1.5x better, which keeps the whole corpus's file under 4 MB
    path.write_bytes(lzma.compress("".join(json.dumps(row) + "\n" for row in rows).encode()))
    print(f"{len(rows)} verdicts written to {path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
