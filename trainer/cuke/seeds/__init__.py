"""The built-in CuKe seed library: parameterised generators of PyTorch reference modules paired with hand-written
CUDA kernels (`ModelNew` / `load_inline`), written for this project and expanded over shapes, dtypes and
compositions. Generation is deterministic for a given seed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context

from . import dense, elementwise, gated, indexing, layout, llm, logic, losses, rowwise
from .render import SeedPair

GENERATORS = {**elementwise.GENERATORS, **gated.GENERATORS, **logic.GENERATORS, **layout.GENERATORS,
              **rowwise.GENERATORS, **dense.GENERATORS, **indexing.GENERATORS, **losses.GENERATORS, **llm.GENERATORS}

__all__ = ["GENERATORS", "SeedPair", "generate_seed_pairs", "generator_names"]

_PARALLEL_FROM = 2000  # pairs: fewer are generated faster than processes start


def generator_names() -> list[str]:
    return list(GENERATORS)


def generate_seed_pairs(seed: int = 0, scale: float = 1.0, generators: list[str] | None = None,
                        workers: int = 1) -> Iterator[SeedPair]:
    """Yield distinct pairs from each generator (a pair's rewritten variants right after it): `scale` times its
    target count, stopping early when a template's variant space runs dry (too many repeats in a row).
    `workers` > 1 runs the generators in that many processes; the pairs and their order are the same."""
    unknown = sorted(set(generators or []) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown seed generator(s) {', '.join(unknown)}; known: {', '.join(GENERATORS)}")
    names = [name for name in GENERATORS if not generators or name in generators]
    wanted = sum(GENERATORS[name][1] for name in names) * scale
    if workers > 1 and len(names) > 1 and wanted >= _PARALLEL_FROM:
        # spawn, not fork: the caller may already run threads (the GPU build prepares headers meanwhile)
        with ProcessPoolExecutor(min(workers, len(names)), mp_context=get_context("spawn")) as pool:
            batches = pool.map(_generator_pairs, names, repeat(seed), repeat(scale))
    else:
        batches = (_generator_pairs(name, seed, scale) for name in names)
    seen: set[str] = set()
    for batch in batches:
        for pair in batch:
            if pair.uid not in seen:  # generators name their pairs by family and content: a repeat is a rare twin
                seen.add(pair.uid)
                yield pair


def _generator_pairs(name: str, seed: int, scale: float) -> list[SeedPair]:
    """One generator's distinct pairs, in order; each generator has its own random stream."""
    make, target = GENERATORS[name]
    rng = random.Random(f"{seed}:{name}")
    want = max(1, round(target * scale))
    seen: set[str] = set()
    pairs: list[SeedPair] = []
    repeats = 0
    for base in make(rng):
        if base.uid in seen:
            repeats += 1
            if repeats > 200:
                break
            continue
        repeats = 0
        for pair in [base] + base.variants:
            if pair.uid in seen or len(pairs) >= want:
                continue
            seen.add(pair.uid)
            pairs.append(pair)
        if len(pairs) >= want:
            break
    return pairs
