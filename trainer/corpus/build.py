"""Build the pretraining corpus: collect code files from the sources, keep the permissively licensed ones, remove
exact and near duplicates, hold out a slice of files for perplexity, cut files into training-sized chunks and write

    train.jsonl[.xz]    {"text": chunk} per line, which `train sft` reads as plain-text samples
    heldout.jsonl[.xz]  the same for the held-out files (never trained on)
    manifest.jsonl      one line per kept file: origin, package, version, file, sha256, licence, chars, chunks, split
    stats.json, stats.md  counts per source and licence, what was skipped and why, size and variety of each split

The build is deterministic: the same sources (package versions, toolkit, sdists) give the same files, and the
manifest's sha256s say whether a rebuild matched.
"""

from __future__ import annotations

import json
import lzma
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..cuke.textsim import MinHasher, normalized_tokens, shingle_hashes
from ..jsonl import json_objects
from ..text_stats import text_stats
from .licences import permissive_expression
from .sources import (DEFAULT_INDEX, DEFAULT_SDISTS, SOURCES, cuda_toolkit_headers, installed_packages,
                      sha256_text, source_distributions)


@dataclass
class CorpusConfig:
    out: Path
    sources: tuple[str, ...] = SOURCES
    packages: tuple[str, ...] | None = None  # installed distributions to take (None: all)
    sdists: tuple[str, ...] = DEFAULT_SDISTS
    sdist_cache: Path | None = None  # None: OUT/sdists
    index_url: str = DEFAULT_INDEX
    cuda_home: Path | None = None  # None: the toolkit nvcc belongs to
    heldout_fraction: float = 0.02  # share of files held out (chosen by content hash)
    near_duplicate: float = 0.85  # estimated Jaccard similarity of token 5-grams at which a file is a copy
    chunk_chars: int = 6000  # longest training text (SFT drops samples longer than its seq_len)
    max_chars: int | None = None  # stop taking files past this many characters (None: no cap)
    compress: bool = False  # write train/heldout as .jsonl.xz (to carry the corpus to a machine without an index)


@dataclass
class _Tally:
    files: int = 0
    chars: int = 0
    chunks: int = 0
    by_origin: Counter = field(default_factory=Counter)
    by_licence: Counter = field(default_factory=Counter)
    by_suffix: Counter = field(default_factory=Counter)


def build_corpus(config: CorpusConfig, log=print) -> dict:
    """Run the whole build into config.out and return the stats (also written to stats.json / stats.md)."""
    started = time.monotonic()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    skipped: Counter = Counter()
    suffix = ".jsonl.xz" if config.compress else ".jsonl"
    dedup = _NearDuplicates(config.near_duplicate)
    exact: set[str] = set()
    tallies = {"train": _Tally(), "heldout": _Tally()}
    per_package: dict[str, Counter] = defaultdict(Counter)
    opener = (lambda p: lzma.open(p, "wt", encoding="utf-8")) if config.compress else \
        (lambda p: open(p, "w", encoding="utf-8"))
    with opener(out / f"train{suffix}.part") as train, opener(out / f"heldout{suffix}.part") as heldout, \
            open(out / "manifest.jsonl.part", "w", encoding="utf-8") as manifest:
        writers = {"train": train, "heldout": heldout}
        total_chars = 0
        for source_file in _collect(config, skipped, log):
            if config.max_chars is not None and total_chars >= config.max_chars:
                skipped["over_max_chars"] += 1
                continue
            if not source_file.licence or not permissive_expression(source_file.licence):
                skipped["licence_not_permissive"] += 1
                per_package[f"{source_file.package}=={source_file.version}"]["not_permissive"] += 1
                continue
            text = _clean(source_file.text)
            if len(text) < 64:
                skipped["too_short"] += 1
                continue
            digest = sha256_text(text)
            exact_key = sha256_text("\n".join(line.strip() for line in text.splitlines() if line.strip()))
            if exact_key in exact:
                skipped["exact_duplicate"] += 1
                continue
            exact.add(exact_key)
            if dedup.seen(text):
                skipped["near_duplicate"] += 1
                continue
            split = "heldout" if int(digest[:8], 16) < config.heldout_fraction * 2 ** 32 else "train"
            chunks = chunk_text(text, config.chunk_chars)
            for chunk in chunks:
                writers[split].write(json.dumps({"text": chunk}) + "\n")
            manifest.write(json.dumps({
                "origin": source_file.origin, "package": source_file.package, "version": source_file.version,
                "file": source_file.path, "sha256": digest, "licence": source_file.licence, "chars": len(text),
                "chunks": len(chunks), "split": split}) + "\n")
            tally = tallies[split]
            tally.files += 1
            tally.chars += len(text)
            tally.chunks += len(chunks)
            tally.by_origin[source_file.origin] += 1
            tally.by_licence[source_file.licence] += 1
            tally.by_suffix[Path(source_file.path).suffix] += 1
            per_package[f"{source_file.package}=={source_file.version}"]["files"] += 1
            per_package[f"{source_file.package}=={source_file.version}"]["chars"] += len(text)
            total_chars += len(text)
    for name in (f"train{suffix}", f"heldout{suffix}", "manifest.jsonl"):
        (out / f"{name}.part").replace(out / name)
    if not tallies["train"].files:
        raise CorpusError(f"no file was kept (skipped: {dict(skipped)}); check --sources and --packages")
    log("measuring the variety of the corpus ...")
    stats = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "splits": {name: {"files": t.files, "chars": t.chars, "chunks": t.chunks, "by_origin": dict(t.by_origin),
                          "by_suffix": dict(t.by_suffix.most_common()), "by_licence": dict(t.by_licence.most_common())}
                   for name, t in tallies.items()},
        "variety": {name: text_stats(record["text"] for _, record in json_objects(out / f"{name}{suffix}", CorpusError))
                    .as_dict() for name in tallies},
        "skipped": dict(skipped.most_common()),
        "packages": {name: dict(counts) for name, counts in sorted(per_package.items())},
        "seconds": round(time.monotonic() - started, 1),
        "files": {"train": f"train{suffix}", "heldout": f"heldout{suffix}", "manifest": "manifest.jsonl"},
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    (out / "stats.md").write_text(stats_markdown(stats))
    return stats


class CorpusError(RuntimeError):
    """The build cannot produce a corpus; the message says what to change."""


def chunk_text(text: str, limit: int) -> list[str]:
    """Cut text into pieces of at most `limit` characters, at blank lines where possible, else at line ends, else
    (a single line longer than the limit) anywhere."""
    if len(text) <= limit:
        return [text]
    chunks, current = [], ""
    for block in text.split("\n\n"):
        piece = block + "\n\n"
        if len(current) + len(piece) <= limit:
            current += piece
            continue
        if current:
            chunks.append(current)
        current = ""
        while len(piece) > limit:
            cut = piece.rfind("\n", 0, limit)
            cut = cut + 1 if cut > 0 else limit
            chunks.append(piece[:cut])
            piece = piece[cut:]
        current = piece
    if current.strip():
        chunks.append(current)
    return [c.rstrip("\n") + "\n" for c in chunks if c.strip()]


def stats_markdown(stats: dict) -> str:
    lines = ["# Pretraining corpus", "", "| split | files | chunks | chars | distinct words | xz ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, split in stats["splits"].items():
        variety = stats["variety"][name]
        lines.append(f"| {name} | {split['files']:,} | {split['chunks']:,} | {split['chars']:,} | "
                     f"{variety['distinct_words']:,} | {variety['xz_ratio']}x |")
    lines += ["", "| source | train files |", "| --- | ---: |"]
    lines += [f"| {k} | {v:,} |" for k, v in stats["splits"]["train"]["by_origin"].items()]
    lines += ["", "| licence | train files |", "| --- | ---: |"]
    lines += [f"| {k} | {v:,} |" for k, v in stats["splits"]["train"]["by_licence"].items()]
    lines += ["", "| skipped because | files |", "| --- | ---: |"]
    lines += [f"| {k} | {v:,} |" for k, v in stats["skipped"].items()]
    lines += ["", "| package | files | chars |", "| --- | ---: | ---: |"]
    lines += [f"| {k} | {v.get('files', 0):,} | {v.get('chars', 0):,} |" for k, v in stats["packages"].items()
              if v.get("files")]
    return "\n".join(lines) + "\n"


def _collect(config: CorpusConfig, skipped: Counter, log):
    unknown = set(config.sources) - set(SOURCES)
    if unknown:
        raise CorpusError(f"unknown source(s) {sorted(unknown)}: choose from {', '.join(SOURCES)}")
    if "site-packages" in config.sources:
        log("reading the installed packages ...")
        names = {n.lower() for n in config.packages} if config.packages else None
        yield from installed_packages(skipped, names)
    if "cuda-toolkit" in config.sources:
        from ...validator.compile import cuda_home
        home = Path(config.cuda_home or cuda_home())
        log(f"reading the CUDA toolkit's headers in {home} ...")
        yield from cuda_toolkit_headers(home, skipped)
    if "sdist" in config.sources and config.sdists:
        log(f"reading {len(config.sdists)} source distributions ...")
        cache = Path(config.sdist_cache or Path(config.out) / "sdists")
        yield from source_distributions(list(config.sdists), cache, skipped, config.index_url)


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip("\n") + "\n"


class _NearDuplicates:
    """MinHash LSH over token 5-grams: a file is a near duplicate when a kept file sharing one of its LSH bands
    has an estimated Jaccard similarity at or above the threshold."""

    def __init__(self, threshold: float, num_perm: int = 64, bands: int = 16):
        self.threshold = threshold
        self.hasher = MinHasher(num_perm, bands=bands)
        self.buckets: dict[tuple[int, bytes], int] = {}
        self.signatures: list[np.ndarray] = []

    def seen(self, text: str) -> bool:
        signature = self.hasher.signature(shingle_hashes(normalized_tokens(text), 5))
        keys = self.hasher.band_keys(signature)
        candidates = {self.buckets[key] for key in keys if key in self.buckets}
        if any((self.signatures[i] == signature).mean() >= self.threshold for i in candidates):
            return True
        index = len(self.signatures)
        self.signatures.append(signature)
        for key in keys:
            self.buckets.setdefault(key, index)
        return False
