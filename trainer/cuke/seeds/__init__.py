"""The built-in CuKe seed library: parameterised generators of PyTorch reference modules paired with hand-written
CUDA kernels (`ModelNew` / `load_inline`), written for this project and expanded over shapes, dtypes and
compositions. Generation is deterministic for a given seed."""

from __future__ import annotations

import random
from collections.abc import Iterator

from . import dense, elementwise, gated, indexing, layout, llm, logic, losses, rowwise
from .render import SeedPair

GENERATORS = {**elementwise.GENERATORS, **gated.GENERATORS, **logic.GENERATORS, **layout.GENERATORS,
              **rowwise.GENERATORS, **dense.GENERATORS, **indexing.GENERATORS, **losses.GENERATORS, **llm.GENERATORS}

__all__ = ["GENERATORS", "SeedPair", "generate_seed_pairs", "generator_names"]


def generator_names() -> list[str]:
    return list(GENERATORS)


def generate_seed_pairs(seed: int = 0, scale: float = 1.0, generators: list[str] | None = None) -> Iterator[SeedPair]:
    """Yield distinct pairs from each generator (a pair's rewritten variants right after it): `scale` times its
    target count, stopping early when a template's variant space runs dry (too many repeats in a row)."""
    unknown = sorted(set(generators or []) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown seed generator(s) {', '.join(unknown)}; known: {', '.join(GENERATORS)}")
    seen: set[str] = set()
    for name, (make, target) in GENERATORS.items():
        if generators and name not in generators:
            continue
        rng = random.Random(f"{seed}:{name}")
        want = max(1, round(target * scale))
        made = repeats = 0
        for base in make(rng):
            if base.uid in seen:
                repeats += 1
                if repeats > 200:
                    break
                continue
            repeats = 0
            for pair in [base] + base.variants:
                if pair.uid in seen or made >= want:
                    continue
                seen.add(pair.uid)
                made += 1
                yield pair
            if made >= want:
                break
