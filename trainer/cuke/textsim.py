"""Code-text similarity for the pipeline: normalised tokens, shingles, MinHash near-duplicate removal, and n-gram
decontamination against a benchmark checkout (e.g. KernelBench)."""

from __future__ import annotations

import functools
import re
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|#[^\n]*", re.S)
_DOCSTRING = re.compile(r'^\s*(?:"""|\'\'\').*?(?:"""|\'\'\')\s*$', re.S | re.M)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?f?|\S")


def normalized_tokens(code: str) -> list[str]:
    """Tokens of code with comments, docstrings and layout removed (Python `#` and C `//`, `/* */` comments).
    `#include` lines go too: they are boilerplate shared by every CUDA source."""
    return _TOKEN.findall(_COMMENT.sub(" ", _DOCSTRING.sub(" ", code)))


@functools.lru_cache(maxsize=1 << 16)
def _token_crc(token: str) -> int:
    return zlib.crc32(token.encode())


def shingle_hashes(tokens: list[str], k: int) -> np.ndarray:
    """Distinct 32-bit hashes of the k-token shingles (the whole text as one shingle when shorter than k):
    a polynomial rolling hash over per-token CRC32s, vectorised with numpy."""
    if not tokens:
        return np.zeros(1, dtype=np.uint64)
    token_hash = np.fromiter((_token_crc(t) for t in tokens), dtype=np.uint64, count=len(tokens))
    k = min(k, len(tokens))
    count = len(tokens) - k + 1
    acc = np.zeros(count, dtype=np.uint64)
    for j in range(k):
        acc = (acc * np.uint64(1_000_003) + token_hash[j:j + count]) & np.uint64(0xFFFFFFFF)
    return np.unique(acc)


class MinHasher:
    """MinHash signatures with multiply-shift hashing (random odd 64-bit multipliers, wrap-around products, high
    32 bits kept), which permutes 32-bit shingle hashes well enough for Jaccard estimates."""

    def __init__(self, num_perm: int = 128, bands: int = 32, seed: int = 1):
        if num_perm % bands:
            raise ValueError("num_perm must be a multiple of bands")
        rng = np.random.default_rng(seed)
        self.a = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64, endpoint=True) | np.uint64(1)
        self.b = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64, endpoint=True)
        self.bands, self.rows = bands, num_perm // bands

    def signature(self, hashes: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            values = (hashes[:, None] * self.a[None, :] + self.b[None, :]) >> np.uint64(32)
        return values.min(axis=0)

    def band_keys(self, signature: np.ndarray) -> list[tuple[int, bytes]]:
        return [(i, signature[i * self.rows:(i + 1) * self.rows].tobytes()) for i in range(self.bands)]


@dataclass
class DedupResult:
    kept: list[int]  # indices into the input, in input order
    dropped: list[tuple[int, str, int, float]]  # (index, "exact"|"near", index kept instead, similarity)


def _exact_key(tokens: list[str]) -> str:
    # numbers are masked: pairs that differ only in sizes or constants are the same program
    return " ".join("<num>" if t[0].isdigit() else t for t in tokens)


_CHUNK = 500  # pairs per signature task


def deduplicate(pairs: list[tuple[str, str]], threshold: float = 0.9, shingle: int = 8, num_perm: int = 128,
                groups: list[str] | None = None, workers: int = 1) -> DedupResult:
    """Keep the first of every group of duplicate (problem, candidate) pairs, in input order.

    exact: identical after normalisation with numeric literals masked (copies, and variants that differ only in
    sizes or constants). near: the estimated Jaccard similarity of `shingle`-token shingles is >= threshold for the
    problem AND for the candidate (requiring both keeps genuinely different ops that share a kernel template).
    `groups` (e.g. the operator family of each pair) limits the near-duplicate search to pairs of the same group.
    `workers` > 1 computes the signatures in that many processes (the decisions are the same).
    """
    fingerprint = functools.partial(_fingerprints, shingle=shingle, num_perm=num_perm)
    if workers > 1 and len(pairs) >= 4 * _CHUNK:  # fewer are hashed faster than processes start
        chunks = [pairs[i:i + _CHUNK] for i in range(0, len(pairs), _CHUNK)]
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            fingerprints = [f for chunk in pool.map(fingerprint, chunks) for f in chunk]
    else:
        fingerprints = fingerprint(pairs)
    exact: dict[str, int] = {}
    kept: list[int] = []
    dropped: list[tuple[int, str, int, float]] = []
    kept_by_group: dict[str, list[int]] = defaultdict(list)
    problem_sigs = np.empty((len(pairs), num_perm), dtype=np.uint64)
    candidate_sigs = np.empty((len(pairs), num_perm), dtype=np.uint64)
    for index, (key, p_sig, c_sig) in enumerate(fingerprints):
        if key in exact:
            dropped.append((index, "exact", exact[key], 1.0))
            continue
        group = kept_by_group[groups[index] if groups else ""]
        if group:
            rows = np.asarray(group)
            both = np.minimum((problem_sigs[rows] == p_sig).mean(axis=1), (candidate_sigs[rows] == c_sig).mean(axis=1))
            best = int(both.argmax())
            if both[best] >= threshold:
                dropped.append((index, "near", group[best], float(both[best])))
                continue
        exact[key] = index
        problem_sigs[index], candidate_sigs[index] = p_sig, c_sig
        group.append(index)
        kept.append(index)
    return DedupResult(kept, dropped)


def _fingerprints(pairs: list[tuple[str, str]], shingle: int, num_perm: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Per pair: the exact-duplicate key and the MinHash signatures of the problem and of the candidate."""
    hasher = MinHasher(num_perm, bands=num_perm // 4)
    out = []
    for problem, candidate in pairs:
        p_tokens, c_tokens = normalized_tokens(problem), normalized_tokens(candidate)
        out.append((_exact_key(p_tokens) + "\x00" + _exact_key(c_tokens),
                    hasher.signature(shingle_hashes(p_tokens, shingle)),
                    hasher.signature(shingle_hashes(c_tokens, shingle))))
    return out


@dataclass
class Overlap:
    fraction: float  # share of the item's n-grams found in the benchmark
    source: str | None  # benchmark file with the most shared n-grams


class ContaminationIndex:
    """n-gram index of a benchmark checkout. n-grams found in many benchmark files (the problem-file skeleton:
    imports, `class Model(nn.Module)`, `get_inputs`) are common format, not content, and are left out."""

    SUFFIXES = (".py", ".cu", ".cuh", ".cpp")

    def __init__(self, root: Path, n: int = 12, common_share: float = 0.05):
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"decontamination source {root} is not a directory: name a benchmark checkout "
                                    "(e.g. a KernelBench clone)")
        files = sorted(p for p in root.rglob("*") if p.suffix in self.SUFFIXES and p.is_file())
        if not files:
            raise FileNotFoundError(f"no .py/.cu files under {root}: is it the benchmark checkout?")
        self.n = n
        self.files = [str(p.relative_to(root)) for p in files]
        per_file = [self._grams(p.read_text(encoding="utf-8", errors="replace")) for p in files]
        doc_freq = Counter(g for grams in per_file for g in grams)
        limit = max(3, int(common_share * len(files)))
        self.common = {g for g, c in doc_freq.items() if c >= limit}
        self.owners: dict[int, list[int]] = defaultdict(list)
        for i, grams in enumerate(per_file):
            for g in grams - self.common:
                self.owners[g].append(i)

    def _grams(self, text: str) -> set[int]:
        return set(shingle_hashes(normalized_tokens(text), self.n).tolist())

    def overlap(self, text: str) -> Overlap:
        grams = self._grams(text) - self.common
        if not grams:
            return Overlap(0.0, None)
        hits = Counter()
        shared = 0
        for g in grams:
            owners = self.owners.get(g)
            if owners:
                shared += 1
                hits.update(owners)
        top = self.files[hits.most_common(1)[0][0]] if hits else None
        return Overlap(shared / len(grams), top)
