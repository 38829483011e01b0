"""SFT throughput and MFU of block-diffusion training at the DICE-1.7B shape on one GPU.

Runs the real training loop (`dice_copilot.trainer.sft.run_training`: noise, [x_t ‖ x_0] mask, loss, fused AdamW,
bf16 autocast) on synthetic packed rows of DICE's length (6144 tokens per row, so 12288 through the model), and
divides the model FLOPs by the bf16 dense-matmul peak measured in the same run. Compared configurations:
  ours      flex-attention BlockMask + per-layer torch.compile (the trainer's GPU default)
  baseline  dense boolean mask through SDPA, eager
Target: >= 40% MFU for "ours". Example (one H200, ~5 minutes):
    python bench/sft_throughput.py --out $OUT/sft_throughput.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TARGET_MFU = 0.40
SPEC_PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0}


@dataclass
class Setup:
    name: str
    attention_backend: str
    compile: bool


SETUPS = (Setup("ours: flex + compile", "flex", True), Setup("baseline: dense SDPA, eager", "dense", False))


def measure_matmul_peak(torch, sizes=(4096, 8192, 16384), repeats=30) -> float:
    """Best bf16 matmul throughput (FLOP/s) over a few square sizes: the peak MFU is measured against."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(5):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            a @ b
        end.record()
        torch.cuda.synchronize()
        best = max(best, 2 * n**3 * repeats / (start.elapsed_time(end) / 1e3))
        del a, b
    torch.cuda.empty_cache()
    return best


def synthetic_samples(vocab_size: int, reserved: set[int], count: int, seed: int):
    """Packed-row material shaped like CuKe SFT data: 256-3072 tokens, 20-50% prompt."""
    from dice_copilot.trainer.sft_data import SFTSample

    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        length = rng.randrange(256, 3072, 4)
        ids = [rng.randrange(16, vocab_size) for _ in range(length)]
        ids = [i if i not in reserved else 17 for i in ids]
        samples.append(SFTSample(tuple(ids), int(length * rng.uniform(0.2, 0.5))))
    return samples


def run_setup(torch, setup: Setup, args, samples, peak: float, spec_peak: float | None) -> dict:
    from dice_copilot.model.config import DiceConfig
    from dice_copilot.model.network import DiceForBlockDiffusion
    from dice_copilot.trainer.sft import run_training
    from dice_copilot.trainer.sft_config import SFTConfig

    row = {"setup": setup.name, "seq_len": args.seq_len, "batch_rows": args.batch, "status": "ok"}
    for checkpointing in ([False, True] if not args.gradient_checkpointing else [True]):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            torch.manual_seed(0)
            with torch.device("cuda"):
                model = DiceForBlockDiffusion(DiceConfig.from_name(args.preset))
            with tempfile.TemporaryDirectory() as tmp:
                config = SFTConfig(
                    model=args.preset, seq_len=args.seq_len, per_device_batch_size=args.batch,
                    max_steps=args.warmup + args.steps, learning_rate=1e-5, warmup_steps=0,
                    attention_backend=setup.attention_backend, compile=setup.compile,
                    gradient_checkpointing=checkpointing, mixed_precision="bf16", output_dir=tmp,
                    tensorboard=False, progress_bar=True, save_every_steps=0,  # per-step tok/s and MFU in the log
                )
                print(f"{setup.name}: training {args.warmup} + {args.steps} steps "
                      f"(gradient_checkpointing={checkpointing}) ...", flush=True)
                started = time.perf_counter()
                result = run_training(config, model, None, samples, save_outputs=False)
                wall = time.perf_counter() - started
        except torch.cuda.OutOfMemoryError:
            print(f"{setup.name}: out of memory with gradient_checkpointing={checkpointing}", flush=True)
            row["status"] = f"OOM (gradient_checkpointing={checkpointing})"
            model = None
            gc.collect()
            continue
        times = result.step_times[args.warmup:]
        flops = sum(result.flops_per_step[args.warmup:])
        achieved = flops / sum(times)
        row.update(
            status="ok", gradient_checkpointing=checkpointing, step_time_s=sum(times) / len(times),
            tokens_per_s=sum(result.tokens_per_step[args.warmup:]) / sum(times), achieved_tflops=achieved / 1e12,
            mfu=achieved / peak, mfu_vs_spec=None if spec_peak is None else achieved / spec_peak,
            peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30, first_loss=result.losses[0][1],
            last_loss=result.losses[-1][1], warmup_wall_s=wall - sum(times),
        )
        print(f"{setup.name}: {row['tokens_per_s']:.0f} tok/s, MFU {100 * row['mfu']:.1f}% "
              f"(compile/warm-up {row['warmup_wall_s']:.0f} s)", flush=True)
        del model, result
        break
    # Drop compiled graphs (they hold the model's layers) before the next setup builds its own model.
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="JSON file for the results")
    parser.add_argument("--preset", default="dice-1.7b", help="DiceConfig preset (default dice-1.7b)")
    parser.add_argument("--seq-len", type=int, default=6144, help="clean tokens per packed row (DICE: 6144)")
    parser.add_argument("--batch", type=int, default=1, help="packed rows per step")
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="always recompute activations (otherwise only after an OOM)")
    parser.add_argument("--only", choices=["ours", "baseline"], default=None, help="run one setup")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark measures GPU training throughput; run it on the GPU machine",
              file=sys.stderr)
        return 2
    from dice_copilot.model.config import DiceConfig

    device_name = torch.cuda.get_device_name(0)
    spec_peak = next((v * 1e12 for k, v in SPEC_PEAK_TFLOPS.items() if k in device_name), None)
    peak = measure_matmul_peak(torch)
    shape = DiceConfig.from_name(args.preset)
    reserved = {shape.mask_token_id, shape.pad_token_id, shape.eos_token_id}
    samples = synthetic_samples(shape.vocab_size, reserved, count=400, seed=0)
    setups = [s for s in SETUPS if args.only is None or s.name.startswith(args.only)]
    print(f"measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s", flush=True)
    rows = []
    for setup in setups:
        rows.append(run_setup(torch, setup, args, samples, peak, spec_peak))
        # Written after each setup, so a run cut short by its time limit still leaves its figures.
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": device_name, "partial": True, "rows": rows}, indent=2) + "\n")

    ours = rows[0] if rows[0]["setup"].startswith("ours") and rows[0]["status"] == "ok" else None
    baseline = next((r for r in rows if r["setup"].startswith("baseline") and r["status"] == "ok"), None)
    report = {
        "device": device_name, "torch": torch.__version__, "preset": args.preset,
        "parameters": shape.num_parameters, "measured_bf16_peak_tflops": peak / 1e12,
        "spec_bf16_peak_tflops": None if spec_peak is None else spec_peak / 1e12, "rows": rows,
        "target_mfu": TARGET_MFU, "met_target": bool(ours and ours["mfu"] >= TARGET_MFU),
        "speedup_vs_baseline": (ours["tokens_per_s"] / baseline["tokens_per_s"]) if ours and baseline else None,
    }
    print(f"\n{device_name}, {args.preset} ({shape.num_parameters / 1e9:.2f}B params), rows of {args.seq_len} tokens "
          f"(x2 through the model) x {args.batch}; measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    header = f"{'setup':30} {'status':10} {'ckpt':5} {'step s':>7} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} " \
             f"{'MFU/spec':>8} {'mem GiB':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['setup']:30} {r['status']}")
            continue
        spec = f"{100 * r['mfu_vs_spec']:.1f}%" if r["mfu_vs_spec"] is not None else "n/a"
        print(f"{r['setup']:30} {'ok':10} {str(r['gradient_checkpointing'])[0]:5} {r['step_time_s']:7.3f} "
              f"{r['tokens_per_s']:9.0f} {r['achieved_tflops']:8.1f} {100 * r['mfu']:5.1f}% {spec:>8} "
              f"{r['peak_memory_gib']:8.1f}")
    if report["speedup_vs_baseline"] is not None:
        print(f"ours / baseline tokens/s: {report['speedup_vs_baseline']:.2f}x")
    print(f"target MFU >= {100 * TARGET_MFU:.0f}% (vs measured peak): {'MET' if report['met_target'] else 'NOT MET'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
