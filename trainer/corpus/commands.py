"""`dice-copilot train corpus build`: the pretraining corpus from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .sources import DEFAULT_INDEX, DEFAULT_SDISTS, SOURCES


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def register_train(train_subparsers) -> None:
    """Add `train corpus` with its `build` subcommand."""
    corpus = train_subparsers.add_parser("corpus", help="pretraining corpus of real CUDA, C++ and Python code")
    sub = corpus.add_subparsers(dest="corpus_command", metavar="ACTION")
    corpus.set_defaults(run=lambda args: (corpus.print_help(), 2)[1])
    build = sub.add_parser(
        "build", help="collect, license-filter and deduplicate source files into {\"text\"} JSONL",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Collect permissively licensed code from the installed packages, the CUDA toolkit's headers and "
                    "pinned source distributions; drop exact and near duplicates; hold out a slice of files; write "
                    "train.jsonl / heldout.jsonl ({\"text\"} per line, read by `train sft`), manifest.jsonl "
                    "(package, version, file, sha256, licence) and stats.md.")
    build.add_argument("--out", required=True, type=Path, help="output folder")
    build.add_argument("--sources", type=_names, default=SOURCES,
                       help="comma-separated sources to read")
    build.add_argument("--packages", type=_names, default=None,
                       help="installed distributions to read, comma-separated (default: every installed one)")
    build.add_argument("--sdists", type=_names, default=DEFAULT_SDISTS,
                       help="source distributions as NAME==VERSION, comma-separated ('' for none)")
    build.add_argument("--sdist-cache", type=Path, default=None,
                       help="folder for downloaded sdists (default: OUT/sdists); a file already there with the "
                            "index's sha256 is not fetched again")
    build.add_argument("--index-url", default=DEFAULT_INDEX, help="package index (PEP 691 JSON simple API)")
    build.add_argument("--cuda-home", type=Path, default=None, help="CUDA toolkit root (default: nvcc's)")
    build.add_argument("--heldout-fraction", type=float, default=0.02, help="share of files held out")
    build.add_argument("--near-duplicate", type=float, default=0.85,
                       help="estimated Jaccard similarity of token 5-grams at which a file counts as a copy")
    build.add_argument("--chunk-chars", type=int, default=6000, help="longest text of one training sample")
    build.add_argument("--max-chars", type=int, default=None, help="stop taking files past this many characters")
    build.add_argument("--xz", action="store_true", help="write train/heldout as .jsonl.xz")
    build.set_defaults(run=run_build_command)


def run_build_command(args: argparse.Namespace) -> int:
    from .build import CorpusConfig, CorpusError, build_corpus
    from .sources import SourceError

    if not 0 <= args.heldout_fraction < 1 or args.chunk_chars < 256 or not 0 < args.near_duplicate <= 1:
        print("error: need 0 <= --heldout-fraction < 1, --chunk-chars >= 256 and 0 < --near-duplicate <= 1",
              file=sys.stderr)
        return 2
    config = CorpusConfig(
        out=args.out, sources=args.sources, packages=args.packages,
        sdists=args.sdists, sdist_cache=args.sdist_cache,
        index_url=args.index_url, cuda_home=args.cuda_home, heldout_fraction=args.heldout_fraction,
        near_duplicate=args.near_duplicate, chunk_chars=args.chunk_chars, max_chars=args.max_chars,
        compress=args.xz)
    try:
        stats = build_corpus(config, log=lambda message: print(message, file=sys.stderr))
    except (CorpusError, SourceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((Path(args.out) / "stats.md").read_text())
    print(f"wrote {args.out}: {stats['splits']['train']['files']:,} training files, "
          f"{stats['splits']['heldout']['files']:,} held out, in {stats['seconds']} s")
    return 0
