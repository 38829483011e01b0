"""The build's stats report: stats.json, stats.md and a speedup histogram PNG."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from .diversity import diversity_markdown, diversity_report

SPEEDUP_LEVELS = (1.0, 1.5, 2.0)


def _speedup_table(outcomes) -> dict:
    """Per level: correct pairs and how many reach each speedup level."""
    table: dict[str, dict] = {}
    for o in outcomes:
        v = o.verdict or {}
        if not v.get("passed") or o.speedup is None:
            continue
        row = table.setdefault(str(o.record.level), {"correct_timed": 0, **{f">={s}": 0 for s in SPEEDUP_LEVELS}})
        row["correct_timed"] += 1
        for s in SPEEDUP_LEVELS:
            if o.speedup >= s:
                row[f">={s}"] += 1
    return dict(sorted(table.items()))


def _histogram(path: Path, speedups: list[float], threshold: float) -> bool:
    if not speedups:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = [math.log2(max(s, 1e-3)) for s in speedups]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(logs, bins=40, color="#4477aa")
    ax.axvline(math.log2(threshold), color="#cc3311", linestyle="--", label=f"keep threshold {threshold}x")
    ticks = [t for t in range(math.floor(min(logs)), math.ceil(max(logs)) + 1)]
    ax.set_xticks(ticks, [f"{2.0 ** t:g}x" for t in ticks])
    ax.set_xlabel("median speedup over eager PyTorch (log scale)")
    ax.set_ylabel("correct pairs")
    ax.set_title(f"CuKe build: speedup of {len(speedups)} correct pairs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(out: Path, config, outcomes, datasets: dict, train, run: dict, decontam_checked: int) -> dict:
    """stats.json / stats.md for a build's outcomes; `train` are the pairs written as training data."""
    status = Counter(o.status for o in outcomes)
    per_family: dict[str, Counter] = defaultdict(Counter)
    per_level: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        per_family[o.record.family][o.status] += 1
        per_family[o.record.family]["total"] += 1
        per_level[str(o.record.level)][o.status] += 1
        per_level[str(o.record.level)]["total"] += 1
    reasons = Counter(o.reason for o in outcomes if o.reason)
    speedups = [o.speedup for o in outcomes if o.speedup is not None and (o.verdict or {}).get("passed")]
    plotted = _histogram(out / "speedup_hist.png", speedups, config.min_speedup)
    config_dict = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()}
    stats = {
        "mode": "compile_only" if config.compile_only else "gpu",
        "speedup_filter": ("not applied: compile-only build (no CUDA device); compiled pairs are in "
                           "compile_only_unverified/ and are NOT training data") if config.compile_only
        else f"median speedup >= {config.min_speedup}x over eager PyTorch",
        "config": config_dict,
        "total_pairs": len(outcomes),
        "status": dict(status),
        "rejection_reasons": dict(reasons.most_common()),
        "per_level": {k: dict(v) for k, v in sorted(per_level.items())},
        "per_family": {k: dict(v) for k, v in sorted(per_family.items())},
        "speedup_pass_counts": _speedup_table(outcomes),
        "decontamination_checked": decontam_checked,
        "datasets": datasets,
        "run": run,
        "speedup_histogram": "speedup_hist.png" if plotted else None,
        "diversity": diversity_report(train),
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    (out / "stats.md").write_text(_markdown(stats), encoding="utf-8")
    return stats


def _markdown(stats: dict) -> str:
    lines = ["# CuKe build report", "", f"- mode: **{stats['mode']}**", f"- speedup filter: {stats['speedup_filter']}",
             f"- pairs in: {stats['total_pairs']}", "- status: " + ", ".join(f"{k} {v}" for k, v in stats["status"].items()),
             ""]
    run = stats["run"]
    lines += [f"- validated this run: {run['validated_this_run']} in {run['validation_seconds']} s on {run['gpus']} GPU(s)"
              + (f" — {run['pairs_per_minute']} pairs/min, {run['pairs_per_gpu_minute']} pairs per GPU-minute"
                 if run["pairs_per_minute"] else ""), ""]
    for reason, pairs in run.get("not_checked", {}).items():
        lines += [f"- **not checked on this machine** (not stored; a rerun on a machine that has what is missing "
                  f"validates them): {pairs} pairs: {reason}", ""]
    table = stats["speedup_pass_counts"]
    if table:
        lines += ["## Correct pairs reaching each speedup, per level", "",
                  "| level | correct (timed) | >=1.0x | >=1.5x | >=2.0x |", "|---|---|---|---|---|"]
        for level, row in table.items():
            lines.append(f"| {level} | {row['correct_timed']} | {row['>=1.0']} | {row['>=1.5']} | {row['>=2.0']} |")
        lines.append("")
    lines += ["## Per level", "", "| level | total | " + " | ".join(sorted({k for v in stats['per_level'].values() for k in v} - {'total'})) + " |"]
    keys = sorted({k for v in stats["per_level"].values() for k in v} - {"total"})
    lines.append("|" + "---|" * (len(keys) + 2))
    for level, row in stats["per_level"].items():
        lines.append(f"| {level} | {row.get('total', 0)} | " + " | ".join(str(row.get(k, 0)) for k in keys) + " |")
    lines += ["", "## Rejection reasons", "", "| reason | pairs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in stats["rejection_reasons"].items()]
    lines += ["", "## Datasets", ""] + [f"- {k}: {v}" for k, v in stats["datasets"].items()]
    lines += [""] + diversity_markdown(stats["diversity"])
    keys = sorted({k for v in stats["per_family"].values() for k in v} - {"total"})
    lines += ["", "## Per family", "", "| family | total | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 2)]
    for fam, row in stats["per_family"].items():
        lines.append(f"| {fam} | {row.get('total', 0)} | " + " | ".join(str(row.get(k, 0)) for k in keys) + " |")
    if stats["speedup_histogram"]:
        lines += ["", f"![speedup histogram]({stats['speedup_histogram']})"]
    return "\n".join(lines) + "\n"
