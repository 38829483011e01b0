"""TraceRL training rows: all rounds of a response packed in one row over its shared clean sequence (ours) against
one row per round, [noisy copy ‖ clean] (the layout of TraceRL's released code), in one run on one machine.

For random responses whose blocks were committed over 1-4 denoising passes each (as dynamic decoding does), it
reports the training tokens per response and the time of one forward + backward of the policy log-probs per
response, median of --repeats, and checks that both layouts give the same log-probs. On a GPU: bf16 autocast,
flex attention, compiled layers; on a CPU: fp32, dense masks (short rows only).

    python bench/rl_trace_rows.py --preset small --prompt 256 --response 512 --responses 4 --out trace_rows.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.network import DiceForBlockDiffusion
from dice_copilot.trainer.rl_trace import TraceSample, collate_trace_rows, policy_logprobs, split_rounds, trace_row
from dice_copilot.trainer.sft_loss import FlexMaskBuilder, dense_layout_mask


def random_sample(generator: torch.Generator, prompt: int, response: int, config: DiceConfig) -> TraceSample:
    """A response whose every block (aligned to absolute positions: the first one shares the prompt tail) was
    committed over 1..(its response tokens) passes; token ids are never the mask token."""
    block = config.block_size
    first = (block - prompt % block) % block
    rest = response - first
    sizes = [first] * (first > 0) + [block] * (rest // block) + [rest % block] * (rest % block > 0)
    steps, step = [], 0
    for size in sizes:
        passes = int(torch.randint(1, size + 1, (1,), generator=generator))
        steps += [step + p for p in sorted(torch.randint(0, passes, (size,), generator=generator).tolist())]
        step += passes
    def ids(n: int) -> list[int]:
        drawn = torch.randint(0, config.vocab_size - 1, (n,), generator=generator)
        return (drawn + (drawn >= config.mask_token_id).long()).tolist()  # skip the mask token's id

    return TraceSample(ids(prompt), ids(response), steps, 1.0)


def time_layout(model, batches, build_mask, device, repeats: int) -> tuple[float, torch.Tensor]:
    """(median seconds of forward + backward over all batches, the log-probs of the last repeat)."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        logps = []
        for batch in batches:
            batch = batch.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logp = policy_logprobs(model, batch, build_mask(*batch.layout), 1.0, model.config.mask_token_id)
            logp.sum().backward()
            logps.append(logp.detach().float().cpu())
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return statistics.median(times), torch.cat(logps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", help="DiceConfig preset (random weights)")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    parser.add_argument("--response", type=int, default=512, help="response tokens")
    parser.add_argument("--responses", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config = DiceConfig.from_name(args.preset, max_position_embeddings=max(8192, args.prompt + args.response + 8))
    torch.manual_seed(args.seed)
    model = DiceForBlockDiffusion(config).to(device).train()
    model.gradient_checkpointing = True  # as the RL trainer runs (RLConfig.gradient_checkpointing)
    flex = device.type == "cuda"
    if flex:
        for layer in model.model.layers:
            layer.compile()
    generator = torch.Generator().manual_seed(args.seed)
    samples = [random_sample(generator, args.prompt, args.response, config) for _ in range(args.responses)]
    packed = [trace_row(s, config.block_size, config.mask_token_id, config.pad_token_id) for s in samples]
    layouts = {
        "packed rounds (ours)": [collate_trace_rows([r], config.pad_token_id, 512 if flex else 1) for r in packed],
        "a row per round (TraceRL)": [collate_trace_rows([r], config.pad_token_id, 512 if flex else 1)
                                      for row in packed for r in split_rounds(row)],
    }
    build_mask = FlexMaskBuilder().layout_mask if flex else dense_layout_mask
    results = {}
    for name, batches in layouts.items():
        time_layout(model, batches[:1], build_mask, device, 1)  # warm-up (compilation on a GPU)
        seconds, logps = time_layout(model, batches, build_mask, device, args.repeats)
        tokens = sum(int((b.segments == 0).sum()) for b in batches)
        results[name] = {"tokens_per_response": tokens / args.responses, "ms_per_response":
                         1000 * seconds / args.responses, "logps": logps}
    ours, theirs = results["packed rounds (ours)"], results["a row per round (TraceRL)"]
    # Targets come copy by copy in both layouts, so the log-probs line up one for one.
    max_diff = float((ours.pop("logps") - theirs.pop("logps")).abs().max())
    rounds = sum(r.rounds for r in packed) / len(packed)

    print(f"device {torch.cuda.get_device_name() if flex else 'CPU'}, preset {args.preset}, prompt {args.prompt}, "
          f"response {args.response}, {args.responses} responses, {rounds:.2f} rounds per response on average, "
          f"median of {args.repeats}")
    print("| layout | training tokens / response | forward + backward ms / response |")
    print("| --- | ---: | ---: |")
    for name, r in results.items():
        print(f"| {name} | {r['tokens_per_response']:.0f} | {r['ms_per_response']:.1f} |")
    token_ratio = theirs["tokens_per_response"] / ours["tokens_per_response"]
    time_ratio = theirs["ms_per_response"] / ours["ms_per_response"]
    print(f"| ratio (TraceRL / ours) | {token_ratio:.2f}x | {time_ratio:.2f}x |")
    print(f"max |log-prob difference| between the layouts: {max_diff:.2e}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"args": vars(args), "device": "cuda" if flex else "cpu", "rounds_per_response": rounds,
                       "results": results, "token_ratio": token_ratio, "time_ratio": time_ratio,
                       "max_logprob_difference": max_diff}, handle, indent=2)


if __name__ == "__main__":
    main()
