"""Turning kept pairs into task sets: the DICE infilling split (imports | CUDA source | declarations + load_inline +
ModelNew), the held-out evaluation split by operator family, by problem-writing style and by composition, and the
easy -> hard ordering."""

from __future__ import annotations

import ast
import hashlib
from collections import Counter
from dataclasses import dataclass, field

from .records import PairRecord


@dataclass(frozen=True)
class InfillSplit:
    prefix: str
    middle: str
    suffix: str


def _is_cuda_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value


def infill_split(cuda_code: str) -> InfillSplit | None:
    """Split a candidate module as DICE's infilling tasks do: the middle is the module-level assignment of the CUDA
    source string (the statement holding `__global__`), the prefix everything above it (imports), the suffix
    everything below (C++ declarations, load_inline, ModelNew). None when there is no such single statement."""
    try:
        tree = ast.parse(cuda_code)
    except SyntaxError:
        return None
    targets = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
               and node.value is not None and _is_cuda_string(node.value)]
    if len(targets) != 1:
        return None
    node = targets[0]
    lines = cuda_code.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    prefix, middle, suffix = "".join(lines[:start]), "".join(lines[start:end]), "".join(lines[end:])
    if "load_inline" not in suffix or "ModelNew" not in suffix or not prefix.strip():
        return None
    return InfillSplit(prefix, middle, suffix)


def _unit_hash(text: str, salt: str) -> float:
    digest = hashlib.sha256(f"{salt}:{text}".encode()).hexdigest()
    return int(digest[:12], 16) / float(1 << 48)


@dataclass
class HeldOutPlan:
    families: list[str]
    compositions: list[str]
    styles: list[str] = field(default_factory=list)  # problem-writing styles (a pair's meta["style"])


def plan_heldout(records: list[PairRecord], family_share: float = 0.08, composition_share: float = 0.05,
                 families: list[str] | None = None, seed: str = "cuke-heldout", max_family_tag_share: float = 0.01,
                 styles: list[str] | None = None, style_count: int = 1, max_style_share: float = 0.12) -> HeldOutPlan:
    """Pick the held-out families, problem-writing styles and compositions.

    Families: the named ones, or a deterministic `family_share` of the primary families whose tag appears in at most
    `max_family_tag_share` of all pairs (so holding them out never empties the training set of a common op: at 3%,
    conv2d, log_softmax and mul, tags of 2.4%, 2.2% and 1.2% of the built-in library, were held out whole).
    Styles: the named ones, or `style_count` of the styles the pairs are tagged with, chosen deterministically among
    those carried by at most `max_style_share` of the pairs (the rarest when none is that rare), so the evaluation
    asks for problems written in a way training never showed without emptying the training set. Pairs without a
    style tag (imported ones) are never held out for their style.
    Compositions: a deterministic `composition_share` of the fused (level >= 2) composition strings.
    """
    tag_counts = Counter(tag for r in records for tag in set(r.families))
    if families is None:
        primary = sorted({r.family for r in records})
        limit = max_family_tag_share * len(records)
        eligible = [f for f in primary if tag_counts[f] <= limit]
        families = [f for f in eligible if _unit_hash(f, seed) < family_share]
        if not families and eligible:
            families = [min(eligible, key=lambda f: _unit_hash(f, seed))]
    if styles is None:
        styles = _pick_styles(records, seed, style_count, max_style_share)
    compositions = sorted({r.composition for r in records if r.level >= 2 and r.family not in families
                           and _unit_hash(r.composition, seed) < composition_share})
    return HeldOutPlan(sorted(families), compositions, sorted(styles))


def _pick_styles(records: list[PairRecord], seed: str, count: int, max_share: float) -> list[str]:
    style_counts = Counter(r.meta.get("style") for r in records if r.meta.get("style"))
    if not style_counts or count <= 0:
        return []
    eligible = [s for s, n in style_counts.items() if n <= max_share * len(records)]
    if not eligible:
        eligible = [min(style_counts, key=lambda s: (style_counts[s], s))]
    return sorted(eligible, key=lambda s: _unit_hash(s, seed))[:count]


def heldout_axes(record: PairRecord, plan: HeldOutPlan) -> list[str]:
    """Why a pair is held out: any of "family", "style", "composition" (empty: it is a training pair)."""
    axes = []
    if set(plan.families).intersection(record.families):
        axes.append("family")
    if record.meta.get("style") in set(plan.styles):
        axes.append("style")
    if record.composition in set(plan.compositions):
        axes.append("composition")
    return axes


def split_heldout(records: list[PairRecord], plan: HeldOutPlan) -> tuple[list[PairRecord], list[PairRecord]]:
    """(train, heldout): a pair is held out when any of its family tags, its problem-writing style or its
    composition is held out, so no training pair shares a held-out family tag, style or composition."""
    train, heldout = [], []
    for r in records:
        (heldout if heldout_axes(r, plan) else train).append(r)
    return train, heldout


def difficulty(record: PairRecord) -> tuple:
    """Sort key, easy -> hard: level, then how many distinct op families, then kernel length."""
    return (record.level, len(set(record.families)), len(record.cuda_code), record.uid)


def order_easy_to_hard(records: list[PairRecord]) -> list[PairRecord]:
    return sorted(records, key=difficulty)
