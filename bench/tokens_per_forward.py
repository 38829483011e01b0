"""Tokens per forward, dynamic (threshold 0.9) against static decoding, on a trained checkpoint's prompts, with the
correctness of the resulting kernels compared (issue 8: a speedup that costs correctness is not one).

No DICE checkpoint can be downloaded here, so by default the bench trains one: a small model from scratch (on a CPU
in minutes) on the elementwise-kernel task of bench/sft_multigpu.py — "y = scale * f(g(h(x)))" written as a CUDA
kernel — holding out prompts (op chains and scales) it never trains on, then decodes those. Each prompt has one
right answer (the corpus's kernel), so a generation is correct when it is that kernel; each generated kernel is also
compiled with `nvcc -cubin` when nvcc is present. `--checkpoint DIR` decodes with an existing checkpoint instead
(trained on this task by an earlier run of this bench).

    python bench/tokens_per_forward.py --out tpf.json    # trains 0.9M parameters, 2,000 steps (~13 min, 2 cores)
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sft_multigpu import SCALES, UNARY, kernel_record

STRATEGIES = {"dynamic": dict(strategy="dynamic", threshold=0.9), "static": dict(strategy="static")}
# A model a CPU trains in minutes; big enough to compose the ops of unseen prompts.
MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32)


def task_split(held_out: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Every prompt of the task once (chains of 1-3 distinct ops x scales), split into (train, held out)."""
    chains = [ops for k in (1, 2, 3) for ops in itertools.permutations(sorted(UNARY), k)]
    records = [kernel_record(ops, scale) for ops in chains for scale in SCALES]
    random.Random(seed).shuffle(records)
    return records[held_out:], records[:held_out]


def train(work: Path, records: list[dict], steps: int) -> Path:
    from dice_copilot.trainer.sft import train_sft
    from dice_copilot.trainer.sft_config import SFTConfig
    from dice_copilot.trainer.tokenizer_training import train_tokenizer

    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    tokenizer = train_tokenizer([r["prompt"] + r["response"] for r in records], 1024, work / "tokenizer")
    config = SFTConfig(
        model="tiny", model_overrides=MODEL, tokenizer=str(tokenizer), train_files=[str(data)], seq_len=256,
        per_device_batch_size=8, max_steps=steps, learning_rate=2e-3, schedule="cosine", warmup_steps=20,
        min_lr_ratio=0.05, save_every_steps=0, log_every_steps=50, save_dtype="float32", compile=False,
        attention_backend="dense", output_dir=str(work / "run"), tensorboard=False, resume=False, seed=0,
    )
    return train_sft(config).checkpoint_dir


def compiles(kernel: str, nvcc: str) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.cu"
        source.write_text(kernel)
        done = subprocess.run([nvcc, "-cubin", "-arch=sm_90", str(source), "-o", str(Path(folder) / "k.cubin")],
                              capture_output=True, timeout=120)
        return done.returncode == 0


def decode(checkpoint: Path, held_out: list[dict], max_new_tokens: int) -> list[dict]:
    from dice_copilot.model import load
    from dice_copilot.model.engine import BlockDiffusionEngine

    model, tokenizer = load(checkpoint)
    engine = BlockDiffusionEngine(model, tokenizer)
    nvcc = shutil.which("nvcc")
    rows = []
    for name, options in STRATEGIES.items():
        started = time.perf_counter()
        generations = engine.generate([r["prompt"] for r in held_out], max_new_tokens=max_new_tokens, **options)
        wall = time.perf_counter() - started
        exact = [g.text.strip() == r["response"].strip() for g, r in zip(generations, held_out)]
        kernels = [g.text.strip().removeprefix("```cpp").removesuffix("```") for g in generations]
        compiled = [compiles(k, nvcc) for k in kernels] if nvcc else []
        tokens = sum(g.stats.generated_tokens for g in generations)
        forwards = sum(g.stats.forward_passes for g in generations)
        rows.append({"strategy": name, **options, "prompts": len(held_out), "generated_tokens": tokens,
                     "forward_passes": forwards, "tokens_per_forward": tokens / max(forwards, 1),
                     "exact": sum(exact), "compiled": sum(compiled) if nvcc else None, "wall_s": wall,
                     "examples": [g.text for g in generations[:2]]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="JSON file for the results")
    parser.add_argument("--work", type=Path, default=Path("tpf_work"), help="data, tokenizer and the training run")
    parser.add_argument("--checkpoint", type=Path, help="decode with this checkpoint instead of training one")
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps of the training run")
    parser.add_argument("--held-out", type=int, default=64, help="prompts kept out of training and decoded")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args(argv)

    train_records, held_out = task_split(args.held_out, seed=0)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    checkpoint = args.checkpoint or train(args.work.resolve(), train_records, args.steps)
    train_s = 0.0 if args.checkpoint else time.perf_counter() - started
    rows = decode(checkpoint, held_out, args.max_new_tokens)

    print(f"\n{len(held_out)} held-out prompts, checkpoint {checkpoint}"
          + (f" (trained here: {args.steps} steps, {train_s:.0f} s)" if train_s else ""))
    print(f"{'strategy':10} {'tokens/forward':>15} {'forwards':>9} {'exact':>7} {'compiles':>9} {'wall s':>7}")
    for row in rows:
        compiled = "-" if row["compiled"] is None else f"{row['compiled']}/{row['prompts']}"
        print(f"{row['strategy']:10} {row['tokens_per_forward']:15.2f} {row['forward_passes']:9d} "
              f"{row['exact']:>3}/{row['prompts']:<3} {compiled:>9} {row['wall_s']:7.1f}")
    dynamic, static = rows
    print(f"dynamic / static tokens per forward: {dynamic['tokens_per_forward'] / static['tokens_per_forward']:.2f}x; "
          f"exact kernels {dynamic['exact']} vs {static['exact']} of {len(held_out)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"checkpoint": str(checkpoint), "train_steps": None if args.checkpoint else
                                    args.steps, "train_s": train_s, "model": MODEL, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
