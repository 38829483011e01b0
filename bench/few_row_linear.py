"""Few-row projections: the kernels of model/few_row_linear.cu vs cuBLAS with Inductor's fused epilogue.

The four projections of a DICE-1.7B layer in a batch-1 denoising pass (8 token rows; q/k/v and gate/up with the
layer's RMSNorm fused in, o_proj and down_proj with the residual add), and the LM head (4 rows), each as 28 calls
over 28 distinct weight matrices (as a forward reads them: nothing left in L2) captured in one CUDA graph and
replayed. Prints microseconds per call for every launch shape the kernels have, the baseline's (the norm as an
Inductor kernel, cuBLAS, the epilogue as an Inductor kernel), the copy floor (weight bytes / copy bandwidth,
measured in the same run) and the ratio.

    python bench/few_row_linear.py --out few_row_linear.json
"""

import argparse
import json

import torch

from decode import copy_bandwidth_gbs  # (bench/ is the script's folder)
from dice_copilot.model import few_row_linear
from dice_copilot.model.config import DiceConfig

LAYERS = 28
REPLAYS = 20


def projections(config: DiceConfig) -> list[tuple[str, int, int, int, str, bool]]:
    """(name, token rows, weight rows, K, epilogue, norm fused) of one layer's projections and the LM head."""
    h, d = config.hidden_size, config.head_dim
    qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * d
    return [("norm + q/k/v", 8, qkv, h, "none", True),
            ("o_proj + residual", 8, h, config.num_attention_heads * d, "residual", False),
            ("norm + gate/up + SiLU·up", 8, 2 * config.intermediate_size, h, "silu_mul", True),
            ("down_proj + residual", 8, h, config.intermediate_size, "residual", False),
            ("LM head", 4, config.vocab_size, h, "none", False)]


def graph_us(calls) -> float:
    """Microseconds per call of the callables in `calls`, captured once in order and replayed."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (REPLAYS * len(calls))


def baseline():
    """The model's path without the kernels, compiled as the engine compiles it (PDL): the norm as an Inductor
    kernel, cuBLAS, then the epilogue as one Inductor kernel."""
    options = {"triton.enable_pdl": True} if hasattr(torch._inductor.config.triton, "enable_pdl") else None
    return torch.compile(few_row_linear.torch_projection, options=options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dice-1.7b")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    assert few_row_linear.available(torch.device("cuda")), "the kernels did not build (see the log)"
    config = DiceConfig.from_name(args.preset)
    bandwidth = copy_bandwidth_gbs("cuda")
    print(f"copy bandwidth {bandwidth:.0f} GB/s", flush=True)
    results = {"copy_bandwidth_gbs": bandwidth, "rows": []}
    torch.manual_seed(0)
    for name, rows, n, k, epilogue, norm in projections(config):
        layers = 1 if name == "LM head" else LAYERS
        weights = [(torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16) for _ in range(layers)]
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        n_out = n // 2 if epilogue == "silu_mul" else n
        residual = torch.randn(rows, n_out, device="cuda", dtype=torch.bfloat16) if epilogue == "residual" else None
        norm_weight = (torch.rand(k, device="cuda") + 0.5).to(torch.bfloat16) if norm else None
        row = {"projection": name, "rows": rows, "n": n, "k": k,
               "floor_us": n * k * 2 / (bandwidth * 1e3), "ours_us": {}}
        for shape in few_row_linear.LAUNCH_SHAPES:
            if few_row_linear.shape_fits(shape, n_out, epilogue, norm):
                row["ours_us"][str(shape)] = graph_us(
                    [lambda w=w, s=shape: few_row_linear.project_rows(x, w, residual, norm_weight, 1e-6, epilogue, s)
                     for w in weights])
        row["default_shape"] = str(few_row_linear.launch_shape(n_out, k, epilogue, norm))
        compiled = baseline()
        row["cublas_us"] = graph_us([lambda w=w: compiled(x, w, residual, norm_weight, 1e-6, epilogue)
                                     for w in weights])
        results["rows"].append(row)
        print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()

    print(f"\n| projection (rows) | ours, default shape (us) | ours, best shape | cuBLAS + Inductor (us) | floor (us) "
          f"| cuBLAS / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in results["rows"]:
        ours = row["ours_us"][row["default_shape"]]
        best = min(row["ours_us"], key=row["ours_us"].get)
        print(f"| {row['projection']} ({row['rows']}) | {ours:.1f} {row['default_shape']} | "
              f"{row['ours_us'][best]:.1f} {best} | {row['cublas_us']:.1f} | {row['floor_us']:.1f} | "
              f"{row['cublas_us'] / ours:.2f}x |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
