"""How varied a CuKe build's training pairs are, measured for the responses (kernels) and the problems separately:
distinct pre-tokeniser words, xz ratio, the near-duplicate rate within each operator family, and counts per kernel
strategy and per problem-writing style (the `strategy` / `style` tags a generator puts in a pair's meta). A model
trained on text that is nearly one template repeated memorises the template, so the build reports these beside the
targets a default build should meet."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from ..text_stats import text_stats
from .textsim import MinHasher, normalized_tokens, shingle_hashes

# What a default build should reach to be worth training on (responses / problems): at most this xz ratio, at
# least this many distinct words; and at least this many pairs over this many families.
TARGETS = {
    "responses": {"max_xz_ratio": 20.0, "min_distinct_words": 15_000},
    "problems": {"max_xz_ratio": 15.0, "min_distinct_words": 5_000},
    "pairs": {"min_pairs": 8_000, "min_families": 60},
}
# Two texts of one family whose token 8-gram sets overlap at least this much count as near duplicates (numbers
# masked: a template filled with other sizes or constants is the same text to a learner).
NEAR_DUPLICATE = 0.9


def diversity_report(records) -> dict:
    """The figures for a list of PairRecords (the build's training pairs)."""
    records = list(records)
    families = Counter(r.family for r in records)
    report = {
        "pairs": len(records),
        "families": len(families),
        "responses": text_stats(r.cuda_code for r in records).as_dict(),
        "problems": text_stats(r.pytorch_code for r in records).as_dict(),
        "near_duplicate_rate": {
            "responses": _near_duplicate_rate(records, lambda r: r.cuda_code),
            "problems": _near_duplicate_rate(records, lambda r: r.pytorch_code),
        },
        "strategies": dict(Counter(r.meta.get("strategy", "untagged") for r in records).most_common()),
        "styles": dict(Counter(r.meta.get("style", "untagged") for r in records).most_common()),
    }
    report["targets"] = _targets_met(report)
    return report


def diversity_markdown(report: dict) -> list[str]:
    """The report's lines for stats.md."""
    lines = ["## Diversity of the training pairs", "",
             f"{report['pairs']} pairs over {report['families']} families.", "",
             "| text | chars | distinct words | xz ratio | near-duplicate rate within a family |",
             "|---|---:|---:|---:|---:|"]
    for name in ("responses", "problems"):
        s = report[name]
        lines.append(f"| {name} | {s['chars']:,} | {s['distinct_words']:,} | {s['xz_ratio']}x | "
                     f"{report['near_duplicate_rate'][name]:.1%} |")
    lines += ["", "| target | wanted | reached | met |", "|---|---|---|---|"]
    lines += [f"| {t['what']} | {t['wanted']} | {t['reached']} | {'yes' if t['met'] else 'no'} |"
              for t in report["targets"]]
    for key, title in (("strategies", "kernel strategy"), ("styles", "problem-writing style")):
        lines += ["", f"| {title} | pairs |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in report[key].items()]
    return lines + [""]


def _targets_met(report: dict) -> list[dict]:
    rows = []
    for name in ("responses", "problems"):
        target, stats = TARGETS[name], report[name]
        rows.append({"what": f"{name}: xz ratio", "wanted": f"<= {target['max_xz_ratio']}x",
                     "reached": f"{stats['xz_ratio']}x", "met": 0 < stats["xz_ratio"] <= target["max_xz_ratio"]})
        rows.append({"what": f"{name}: distinct words", "wanted": f">= {target['min_distinct_words']:,}",
                     "reached": f"{stats['distinct_words']:,}",
                     "met": stats["distinct_words"] >= target["min_distinct_words"]})
    rows.append({"what": "pairs", "wanted": f">= {TARGETS['pairs']['min_pairs']:,}", "reached": f"{report['pairs']:,}",
                 "met": report["pairs"] >= TARGETS["pairs"]["min_pairs"]})
    rows.append({"what": "families", "wanted": f">= {TARGETS['pairs']['min_families']}",
                 "reached": str(report["families"]), "met": report["families"] >= TARGETS["pairs"]["min_families"]})
    return rows


def _near_duplicate_rate(records, text_of) -> float:
    """Share of records whose text has a near duplicate (estimated Jaccard >= NEAR_DUPLICATE) in its own family."""
    if not records:
        return 0.0
    hasher = MinHasher(128, bands=32)
    by_family: dict[str, list[np.ndarray]] = defaultdict(list)
    for record in records:
        tokens = ["<num>" if t[0].isdigit() else t for t in normalized_tokens(text_of(record))]
        by_family[record.family].append(hasher.signature(shingle_hashes(tokens, 8)))
    duplicated = 0
    for signatures in by_family.values():
        if len(signatures) < 2:
            continue
        matrix = np.stack(signatures)
        for i in range(len(matrix)):
            similarity = (matrix == matrix[i]).mean(axis=1)
            similarity[i] = 0.0
            duplicated += bool(similarity.max() >= NEAR_DUPLICATE)
    return duplicated / len(records)
