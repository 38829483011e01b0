"""Few-row linear layers at the DICE-1.7B shape: the split-K Triton kernel (model/linear_kernels.py) against cuBLAS,
per projection, with a sweep of the kernel's tile sizes and split counts.

Each variant is timed as a CUDA graph of 28 calls over 28 distinct weights (a model's layers, so no weight is
in L2 when it is read), 8 rows (a batch-1 denoising pass). Prints µs per call and the bandwidth reached.
"""

import argparse
import json
import sys

import torch

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.linear_kernels import split_k_config, split_k_partials

LAYERS = 28


def graph_us(fn, inputs) -> float:
    """µs per call of fn over each of `inputs`, replayed as one CUDA graph."""
    for args in inputs[:2]:
        fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in inputs:
            fn(*args)
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / 20 / len(inputs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dice-1.7b")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/linear_sweep.py needs a CUDA device", file=sys.stderr)
        return 2
    config = DiceConfig.from_name(args.preset)
    hidden, head_dim = config.hidden_size, config.head_dim
    shapes = {
        "qkv": ((config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim, hidden),
        "o_proj": (hidden, config.num_attention_heads * head_dim),
        "gate_up": (2 * config.intermediate_size, hidden),
        "down_proj": (hidden, config.intermediate_size),
    }
    results = {}
    for name, (n, k) in shapes.items():
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
        x = torch.randn(args.rows, k, device="cuda", dtype=torch.bfloat16)
        inputs = [(x, w) for w in weights]
        mb = n * k * 2 / 1e6
        row = {"MB": mb, "cublas": graph_us(torch.nn.functional.linear, inputs)}
        reference = torch.nn.functional.linear(x, weights[0]).float()
        for block_n in (32, 64, 128):
            for block_k in (32, 64, 128, 256):
                for programs in (264, 528, 1056):
                    for warps, stages in ((2, 3), (4, 2), (4, 3), (4, 4), (8, 4)):
                        cfg = split_k_config(n, k, block_n, block_k, programs)
                        if cfg is None:
                            continue
                        key = f"{block_n}x{block_k}/s{cfg[2]}/w{warps}/st{stages}"
                        if key in row:
                            continue
                        try:
                            got = split_k_partials(x, weights[0], *cfg, warps, stages).sum(0)
                            error = (got - reference).abs().max().item()
                            us = graph_us(lambda a, b, c=cfg: split_k_partials(a, b, *c, warps, stages), inputs)
                        except Exception as e:  # a config the GPU cannot run (shared memory): skip it
                            print(f"{name} {key}: {type(e).__name__}", flush=True)
                            continue
                        row[key] = us
                        if error > 0.05:
                            print(f"{name} {key}: max error {error}", flush=True)
        best = min((v, kk) for kk, v in row.items() if kk not in ("MB", "cublas"))
        bcfg = best[1]
        block_n, block_k = (int(v) for v in bcfg.split("/")[0].split("x"))
        splits, warps, stages = (int(p.lstrip("swt")) for p in bcfg.split("/")[1:])
        row["best"] = bcfg
        row["best_with_sum"] = graph_us(
            lambda a, b: split_k_partials(a, b, block_n, block_k, splits, warps, stages).sum(0).to(a.dtype), inputs)
        results[name] = row
        print(f"{name:10} {mb:7.1f} MB  cuBLAS {row['cublas']:6.2f} us ({mb / row['cublas']:.2f} TB/s)  "
              f"split-K best {best[0]:6.2f} us ({mb / best[0]:.2f} TB/s) [{bcfg}], with eager sum "
              f"{row['best_with_sum']:6.2f} us", flush=True)
        del weights
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
