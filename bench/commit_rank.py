"""Commit ranking: descending_rank (n x n comparisons Inductor fuses) vs argsort().argsort() (two ATen sorts).

Times the engine's commit choice (confidence-ranked strategies) compiled as the engine compiles it and replayed
from a CUDA graph, batch by batch, on one GPU. Prints microseconds per call and the ratio.

    python bench/commit_rank.py --out commit_rank.json
"""

import argparse
import json

import torch

from dice_copilot.model.engine import choose_commits, commit_quota, descending_rank


def sorted_rank(values: torch.Tensor) -> torch.Tensor:
    """The baseline: each entry's place in its row sorted descending, by sorting twice."""
    return values.argsort(dim=1, descending=True, stable=True).argsort(dim=1)


def commit_step(rank_by):
    """The commit choice of one pass (engine.choose_commits with the 'dynamic' strategy) ranking with rank_by."""
    def step(confidence, is_masked, block_masked, step_in_block, threshold):
        confidence = confidence.masked_fill(~is_masked, float("-inf"))
        quota = commit_quota(block_masked, step_in_block, 4, is_masked)
        return choose_commits("dynamic", confidence, is_masked, quota, threshold, rank_by)
    return torch.compile(step, dynamic=True)


def replay_us(step, args, replays: int = 2000) -> float:
    """Microseconds per call of step(*args), from one CUDA graph of `replays` calls."""
    for _ in range(3):
        step(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(replays):
            step(*args)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / replays


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,128")
    parser.add_argument("--block", type=int, default=4, help="block size (positions ranked per row)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    ours, baseline = commit_step(descending_rank), commit_step(sorted_rank)
    rows = []
    print(f"{'batch':>6} {'ours us':>9} {'argsort us':>11} {'ratio':>6}")
    for batch in [int(b) for b in args.batches.split(",")]:
        generator = torch.Generator(device=device).manual_seed(batch)
        confidence = torch.rand(batch, args.block, device=device, generator=generator)
        is_masked = torch.rand(batch, args.block, device=device, generator=generator) < 0.7
        block_masked = is_masked.sum(1)
        step_in_block = torch.zeros(batch, dtype=torch.long, device=device)
        inputs = (confidence, is_masked, block_masked, step_in_block, 0.9)
        if not torch.equal(ours(*inputs), baseline(*inputs)):
            raise SystemExit(f"batch {batch}: descending_rank and argsort disagree")
        row = {"batch": batch, "block": args.block, "ours_us": replay_us(ours, inputs),
               "argsort_us": replay_us(baseline, inputs)}
        rows.append(row)
        print(f"{batch:>6} {row['ours_us']:>9.2f} {row['argsort_us']:>11.2f} "
              f"{row['argsort_us'] / row['ours_us']:>5.2f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
