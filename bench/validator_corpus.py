"""Validator regression corpus (issue 30): every file of tests/validator_corpus/ through one ValidatorPool. Prints,
per style, how many honest files passed `ide` and `strict`; per bug, how many wrong files were rejected as incorrect
for the right reason; and seconds per verdict. Writes every verdict's row and the summary as JSON.

Without a CUDA device the verdicts are compile-only, and the bench says so: "passed" then means compiled, and the
wrong files cannot be rejected (they compile; only the correctness checks tell them apart).

    python bench/validator_corpus.py --out corpus.json                  # on the GPU machine
    python bench/validator_corpus.py --out corpus.json --only gelu_kb_example,softmax_triton
    python bench/validator_corpus.py --out corpus.json --timing         # also time every verdict (slower)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from dice_copilot.validator import Budget, Candidate, Problem, ValidatorPool
from dice_copilot.validator.compile import CompileConfig
from dice_copilot.validator.static_checks import POLICIES
from dice_copilot.validator.verdict import Outcome

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from validator_corpus.corpus import entries, judge  # noqa: E402  (the corpus and its expectations live with the tests)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the rows and the summary")
    parser.add_argument("--only", help="comma-separated entry names (default: the whole corpus)")
    parser.add_argument("--timing", action="store_true", help="time each verdict too (default: correctness only)")
    parser.add_argument("--cache", type=Path, help="build cache (default: a fresh temporary folder = cold builds)")
    args = parser.parse_args()
    chosen = entries()
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {e.name for e in chosen}
        if unknown:
            parser.error(f"not in tests/validator_corpus/manifest.toml: {', '.join(sorted(unknown))}")
        chosen = [e for e in chosen if e.name in names]
    budget = Budget(timing=args.timing, call_timeout_s=30, compile_timeout_s=600)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="dice_corpus_cache_"))
    results = {"commit": _commit(), "cache": str(cache), "timing": args.timing, "rows": [], "walls_s": {}}

    with ValidatorPool(compile_config=CompileConfig(cache_dir=cache)) as pool:
        results["mode"] = "gpu" if pool.has_gpu else "compile_only"
        results["device"] = _device_name() if pool.has_gpu else None
        if not pool.has_gpu:
            print("compile-only: no CUDA device here, so no correctness check runs. 'passed' below means the file "
                  "compiled; wrong files cannot be rejected here.", flush=True)
        for policy in POLICIES:
            batch = [e for e in chosen if policy in e.policies]
            if not batch:
                continue
            items = [(Problem.from_file(e.problem), Candidate.from_file(e.file)) for e in batch]
            start = time.perf_counter()
            for index, verdict in pool.validate_iter(items, policy, budget):
                row = _row(batch[index], policy, verdict, pool.has_gpu)
                results["rows"].append(row)
                mark = {True: "ok", False: "WRONG", None: "-"}[row["as_expected"]]
                print(f"{policy:6s} {row['kind']:6s} {row['name']:34s} {mark:5s} {row['seconds']:6.2f}s  "
                      f"{row['summary'][:110]}", flush=True)
            results["walls_s"][policy] = time.perf_counter() - start
    results["summary"] = _summary(results["rows"])
    print_tables(results)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    return 0


def _row(entry, policy: str, verdict, on_gpu: bool) -> dict:
    """One verdict as a JSON row; as_expected: the manifest's expectation met (None: cannot be judged here)."""
    if on_gpu:
        problem = judge(entry, verdict)
        as_expected = problem is None
    else:
        as_expected, problem = _judged_without_device(entry, verdict)
    return {"name": entry.name, "kind": entry.kind, "group": entry.group, "policy": policy, "passed": verdict.passed,
            "compile_only": verdict.compile_only, "stage": verdict.stage, "failure_code": verdict.failure_code,
            "failure": verdict.failure, "as_expected": as_expected, "problem": problem,
            "seconds": seconds_of(verdict), "stage_times": verdict.stage_times, "cached_build": verdict.cached_build,
            "fresh_worker": verdict.details.get("fresh_worker"), "flags": verdict.flags, "speedup": verdict.speedup,
            "strategies": [b.get("strategy") for b in verdict.details.get("builds", [])],
            "summary": problem or verdict.summary()}


def _judged_without_device(entry, verdict) -> tuple[bool | None, str | None]:
    """Compile-only: an honest file is as expected when it compiled; a verdict that built nothing or could not check
    here judges nothing, and neither does a wrong file's (only the correctness checks tell it apart)."""
    if entry.kind == "wrong":
        return None, None
    if verdict.outcome is Outcome.NOT_CHECKED:
        return None, f"not checked here: {verdict.failure}"
    if not verdict.passed:
        return False, f"{verdict.failure_code}: {verdict.failure}"
    if not verdict.details.get("builds"):
        return None, "nothing was compiled here (no CUDA extension: Triton compiles at its first launch, on a GPU)"
    return True, None


def seconds_of(verdict) -> float:
    """Time spent on the verdict itself (static checks, builds, the worker's checks), not its wait in the queues."""
    return sum(verdict.stage_times.get(stage, 0.0) for stage in ("static", "compile", "gpu"))


def _summary(rows: list[dict]) -> dict:
    def rate(selected):
        judged = [r for r in selected if r["as_expected"] is not None]
        return None if not judged else sum(r["as_expected"] for r in judged) / len(judged)

    honest = [r for r in rows if r["kind"] == "honest"]
    wrong = [r for r in rows if r["kind"] == "wrong"]
    return {"verdicts": len(rows),
            "honest_pass_rate_ide": rate([r for r in honest if r["policy"] == "ide"]),
            "honest_pass_rate_strict": rate([r for r in honest if r["policy"] == "strict"]),
            "wrong_rejection_rate": rate(wrong),
            "seconds_per_verdict_mean": statistics.fmean(r["seconds"] for r in rows) if rows else None,
            "seconds_per_verdict_median": statistics.median(r["seconds"] for r in rows) if rows else None}


def print_tables(results: dict) -> None:
    rows, compile_only = results["rows"], results["mode"] == "compile_only"
    fmt_rate = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    word = "compiled" if compile_only else "passed"
    print(f"\nhonest files ({'compile-only: no device' if compile_only else results['device']}, commit "
          f"{results['commit']})\n")
    print(f"| style | n | {word} ide | {word} strict | s / verdict |")
    print("|---|---:|---:|---:|---:|")
    for group, members in _grouped(r for r in rows if r["kind"] == "honest"):
        print(f"| {group} | {len({r['name'] for r in members})} | {_count(members, 'ide')} | "
              f"{_count(members, 'strict')} | {statistics.fmean(r['seconds'] for r in members):.2f} |")
    wrong = [r for r in rows if r["kind"] == "wrong"]
    if wrong:
        print("\nwrong files: rejected as incorrect with the right detail\n")
        print("| bug | n | rejected ide | rejected strict | s / verdict |")
        print("|---|---:|---:|---:|---:|")
        for group, members in _grouped(wrong):
            print(f"| {group} | {len({r['name'] for r in members})} | {_count(members, 'ide')} | "
                  f"{_count(members, 'strict')} | {statistics.fmean(r['seconds'] for r in members):.2f} |")
    s = results["summary"]
    print(f"\nhonest {word} ide {fmt_rate(s['honest_pass_rate_ide'])}, strict {fmt_rate(s['honest_pass_rate_strict'])}"
          f"; wrong rejected {'not judged (no device)' if compile_only else fmt_rate(s['wrong_rejection_rate'])}; "
          f"{s['verdicts']} verdicts, {s['seconds_per_verdict_mean'] or 0:.2f} s each on average (median "
          f"{s['seconds_per_verdict_median'] or 0:.2f}); wall " +
          ", ".join(f"{p} {w:.1f} s" for p, w in results["walls_s"].items()))
    for r in rows:
        if r["as_expected"] is False:
            print(f"  not as expected: {r['name']} ({r['policy']}): {r['problem']}")
        elif r["as_expected"] is None and r["kind"] == "honest":
            print(f"  not judged: {r['name']} ({r['policy']}): {r['problem']}")


def _grouped(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    return sorted(groups.items())


def _count(members: list[dict], policy: str) -> str:
    """"k/n" of one policy's judged rows as expected ("-" when no row of the group asks for that policy)."""
    selected = [r for r in members if r["policy"] == policy]
    if not selected:
        return "-"
    judged = [r for r in selected if r["as_expected"] is not None]
    if not judged:
        return "not run"
    unjudged = len(selected) - len(judged)
    return f"{sum(r['as_expected'] for r in judged)}/{len(judged)}" + (f" ({unjudged} not run)" if unjudged else "")


def _commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or None


def _device_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


if __name__ == "__main__":
    sys.exit(main())
