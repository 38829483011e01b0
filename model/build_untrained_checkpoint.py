"""Builds an UNTRAINED stand-in checkpoint: a real checkpoint in the layout every command reads, with random weights,
small enough that the CPU tests decode with it in milliseconds (the tests' `tests/fixtures/untrained_checkpoint` is
one). The embedded default is the trained dice-tiny checkpoint (trainer/recipes/dice-tiny); this stand-in is for
tests and for trying the pipeline's plumbing, never for suggestions.

It holds a byte-level BPE tokenizer trained on this project's own CUDA/PyTorch text (the DICE prompts, the one-shot
example and the project's Python sources) and a tiny Qwen3-shaped network with seeded random weights. `config.json`
carries `"dice_copilot_untrained": true`, so every command that loads it says the output is noise.

Deterministic: the same corpus files and arguments give byte-identical files.
    python -m dice_copilot.model.build_untrained_checkpoint --out DIR [--vocab-size N] [--seed S] [--force]
"""

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dice_copilot.trainer.tokenizer_training import MASK, train_tokenizer

from .checkpoint import CONFIG_FILE, read_config, save
from .config import DiceConfig
from .network import DiceForBlockDiffusion
from .prompts import end_to_end_prompt, example_infill_parts, example_model, infill_prompt
from .tokenizer import DiceTokenizer

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Folders whose Python sources are the tokenizer corpus (besides the prompts): the project's own code.
CORPUS_FOLDERS = ("model", "validator", "server", "trainer", "examples")
DEFAULT_VOCAB_SIZE = 4096
DEFAULT_SEED = 0

README = """# Untrained stand-in checkpoint (UNTRAINED)

Random weights: a stand-in checkpoint for tests and for trying the pipeline's plumbing. Its output is noise.
For suggestions use the embedded default (the trained dice-tiny checkpoint) or a DICE checkpoint (`--checkpoint PATH`).
Rebuild it with `python -m dice_copilot.model.build_untrained_checkpoint --out DIR`; build_info.json lists the corpus
files (with SHA-256) the tokenizer was trained on.
"""


def corpus_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """The project's Python/CUDA sources, in a fixed order, excluding this checkpoint folder."""
    files = []
    for folder in CORPUS_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".cu", ".cuh") and path.is_file() and "default_checkpoint" not in path.parts:
                files.append(path)
    return files


def corpus_texts(files: list[Path]) -> list[str]:
    """The DICE prompts for the one-shot example first (the text every request starts with), then the sources."""
    prefix, _, suffix = example_infill_parts()
    prompts = [end_to_end_prompt(example_model()), infill_prompt(example_model(), prefix, suffix)]
    return prompts + [path.read_text(encoding="utf-8") for path in files]


def build(out: Path, vocab_size: int = DEFAULT_VOCAB_SIZE, seed: int = DEFAULT_SEED) -> Path:
    """Train the tokenizer, initialise the tiny network with `seed`, and save both to `out` (atomically)."""
    files = corpus_files()
    with tempfile.TemporaryDirectory() as scratch:
        train_tokenizer(corpus_texts(files), vocab_size, scratch)
        mask_id = Tokenizer.from_file(str(Path(scratch) / "tokenizer.json")).token_to_id(MASK)
        tokenizer = DiceTokenizer.from_dir(scratch, mask_token_id=mask_id)
    config = DiceConfig.from_name(
        "tiny", vocab_size=tokenizer.vocab_size, mask_token_id=tokenizer.mask_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, untrained=True,
    )
    torch.manual_seed(seed)
    model = DiceForBlockDiffusion(config)
    build_info = {
        "untrained": True,
        "seed": seed,
        "vocab_size": tokenizer.vocab_size,
        "preset": "tiny",
        "corpus": [
            {"path": str(p.relative_to(PROJECT_ROOT)), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for p in files
        ],
    }
    return save(
        model, tokenizer, out,
        extra_files={"README.md": README, "build_info.json": json.dumps(build_info, indent=2) + "\n"},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write (replaced)")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="tokenizer vocabulary size")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the random weights")
    parser.add_argument("--force", action="store_true",
                        help="replace a trained checkpoint at --out (refused otherwise)")
    args = parser.parse_args(argv)
    if (args.out / CONFIG_FILE).is_file() and not read_config(args.out).untrained and not args.force:
        print(f"error: {args.out} holds a trained checkpoint; this would replace it with random weights. Pass --out "
              f"with another folder, or --force to replace it", file=sys.stderr)
        return 2
    out = build(args.out, args.vocab_size, args.seed)
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote an UNTRAINED stand-in checkpoint to {out} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
