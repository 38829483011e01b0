"""How varied the built-in CuKe seed library is: generate it at --scale (no validation), deduplicate as the build does
(exact duplicates, then near duplicates within each family), and print the diversity figures of the pairs
(trainer/cuke/diversity.py: distinct Qwen2 pre-tokeniser words, xz ratio and near-duplicate rate, for responses and
problems apart; families) for the seed library of an older commit beside the current one, then the counts per
kernel strategy and per problem-writing style of the current library.

These are figures of GENERATED pairs. The targets of the build report apply to the pairs KEPT after GPU validation
(correct and >= 2x faster), a subset of these; run the build on a GPU machine for those.

    python bench/cuke_diversity.py --scale 2.5                  # old (git f2da8ba) beside new
    python bench/cuke_diversity.py --scale 1 --no-old --json out.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS_DIR = "trainer/cuke/seeds"
OLD_REF = "f2da8ba"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=2.5, help="multiply every generator's pair count (default 2.5)")
    parser.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    parser.add_argument("--old-ref", default=OLD_REF, help=f"git commit of the seed library to compare with ({OLD_REF})")
    parser.add_argument("--no-old", action="store_true", help="measure the current library only")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")

    from dice_copilot.trainer.cuke import seeds as current

    results = {}
    if not args.no_old:
        try:
            old = load_seed_library(args.old_ref)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        results[f"old ({args.old_ref})"] = measure(old, args.scale, args.seed)
    results["new (working tree)"] = measure(current, args.scale, args.seed)
    print_report(results, args.scale)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


def load_seed_library(ref: str):
    """The seed package as it was at `ref`, imported from a temporary copy (its modules import only each other)."""
    listing = _git("ls-tree", "--name-only", f"{ref}:{SEEDS_DIR}")
    files = [name for name in listing.split() if name.endswith(".py")]
    if not files:
        raise RuntimeError(f"no seed library at {ref}:{SEEDS_DIR}")
    root = Path(tempfile.mkdtemp(prefix="cuke_seeds_"))
    package = f"cuke_seeds_{ref}"
    (root / package).mkdir()
    for name in files:
        (root / package / name).write_text(_git("show", f"{ref}:{SEEDS_DIR}/{name}"), encoding="utf-8")
    sys.path.insert(0, str(root))
    return importlib.import_module(package)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()} (is {REPO} a git checkout with that "
                           "commit?)")
    return proc.stdout


def measure(library, scale: float, seed: int) -> dict:
    """Generate, deduplicate as the build does, and report."""
    from dice_copilot.trainer.cuke.diversity import diversity_report
    from dice_copilot.trainer.cuke.records import PairRecord
    from dice_copilot.trainer.cuke.textsim import deduplicate

    start = time.perf_counter()
    pairs = list(library.generate_seed_pairs(seed=seed, scale=scale))
    generated = time.perf_counter() - start
    start = time.perf_counter()
    dedup = deduplicate([(p.pytorch_code, p.cuda_code) for p in pairs], threshold=0.9,
                        groups=[p.family for p in pairs])
    dedup_seconds = time.perf_counter() - start
    kept = [pairs[i] for i in dedup.kept]
    records = [PairRecord(uid=p.uid, pytorch_code=p.pytorch_code, cuda_code=p.cuda_code, families=p.families,
                          level=p.level, composition=p.composition, source="builtin", dtype=p.dtype,
                          meta=getattr(p, "meta", {}) or {}) for p in kept]
    start = time.perf_counter()
    report = diversity_report(records)
    report_seconds = time.perf_counter() - start
    report.update(generated=len(pairs), after_dedup=len(kept), generation_seconds=round(generated, 1),
                  dedup_seconds=round(dedup_seconds, 1), report_seconds=round(report_seconds, 1),
                  rewrites=dict(Counter(r.meta.get("rewrite", "none") for r in records)),
                  dtypes=dict(Counter(r.dtype for r in records).most_common()))
    return report


def print_report(results: dict, scale: float) -> None:
    names = list(results)
    print(f"\nCuKe seed library at --scale {scale}: GENERATED pairs after deduplication (not validated; the build's "
          "targets apply to kept pairs)\n")
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    rows = [("pairs generated", lambda r: f"{r['generated']:,}"), ("pairs after dedup", lambda r: f"{r['after_dedup']:,}"),
            ("families", lambda r: str(r["families"]))]
    for text in ("responses", "problems"):
        rows += [(f"{text}: chars", lambda r, t=text: f"{r[t]['chars']:,}"),
                 (f"{text}: distinct words", lambda r, t=text: f"{r[t]['distinct_words']:,}"),
                 (f"{text}: xz ratio", lambda r, t=text: f"{r[t]['xz_ratio']}x"),
                 (f"{text}: near duplicates in family", lambda r, t=text: f"{r['near_duplicate_rate'][t]:.1%}")]
    rows += [("generation seconds", lambda r: str(r["generation_seconds"])),
             ("dedup seconds", lambda r: str(r["dedup_seconds"]))]
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(results[n]) for n in names) + " |")
    new = results[names[-1]]
    for key, title in (("strategies", "kernel strategy"), ("styles", "problem-writing style"), ("rewrites", "rewrite"),
                       ("dtypes", "dtype")):
        print(f"\n| {title} ({names[-1]}) | pairs |\n|---|---:|")
        for value, count in new[key].items():
            print(f"| {value} | {count:,} |")


if __name__ == "__main__":
    sys.exit(main())
