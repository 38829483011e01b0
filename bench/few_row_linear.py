"""Few-row projections: the kernels of model/few_row_linear.cu vs cuBLAS with Inductor's fused epilogue.

The four projections of a DICE-1.7B layer in a batch-1 denoising pass (8 token rows; q/k/v and gate/up with the
layer's RMSNorm fused in, o_proj and down_proj with the residual add), and the LM head (4 rows), each as 28 calls
over 28 distinct weight matrices (as a forward reads them: nothing left in L2) captured in one CUDA graph and
replayed. Prints microseconds per call for every launch shape the kernels have, the baseline's (the norm as an
Inductor kernel, cuBLAS, the epilogue as an Inductor kernel), the copy floor (weight bytes / copy bandwidth,
measured in the same run) and the ratio.

    python bench/few_row_linear.py --out few_row_linear.json

--chain times a layer's projections in the order a forward runs them (o_proj, gate/up, down_proj, then the next
layer's q/k/v), 28 layers in one graph: as four kernels a layer, as one persistent chain kernel a layer
(few_row_linear.project_chain), as a chain of three and the q/k/v kernel, and as one chain over all 28 layers;
first it checks the chain's outputs against the kernels'.
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


def layer_weights(config: DiceConfig) -> dict:
    """Random weights of one layer's projections, shaped as the model fuses them."""
    h, d = config.hidden_size, config.head_dim
    n_qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * d

    def matrix(n, k):
        return (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)

    def norm():
        return (torch.rand(h, device="cuda") + 0.5).to(torch.bfloat16)

    return {"o": matrix(h, config.num_attention_heads * d), "gate_up": matrix(2 * config.intermediate_size, h),
            "down": matrix(h, config.intermediate_size), "qkv": matrix(n_qkv, h), "mlp_norm": norm(),
            "attention_norm": norm()}


def chain_steps(layer: dict, residual: torch.Tensor, eps: float, with_qkv: bool = True) -> list:
    """A layer from its attention output: o_proj + residual, norm + gate/up + SiLU·up, down_proj + residual (of
    o_proj's output), then (with_qkv) the next layer's norm + q/k/v; the next layer's weights stand in as this
    layer's."""
    steps = few_row_linear.layer_tail_steps(residual, layer["o"], layer["mlp_norm"], layer["gate_up"], layer["down"],
                                            layer["qkv"], layer["attention_norm"], eps)
    return steps if with_qkv else steps[:3]


def kernels_layer(layer: dict, attention: torch.Tensor, residual: torch.Tensor, eps: float,
                  with_qkv: bool = True) -> list:
    """chain_steps as one few-row kernel each."""
    project = few_row_linear.project_rows
    h1 = project(attention, layer["o"], residual, None, 0.0, "residual")
    g = project(h1, layer["gate_up"], None, layer["mlp_norm"], eps, "silu_mul")
    h2 = project(g, layer["down"], h1, None, 0.0, "residual")
    return [h1, g, h2] + ([project(h2, layer["qkv"], None, layer["attention_norm"], eps, "none")] if with_qkv else [])


def chain_main(config: DiceConfig, bandwidth: float, rows: int) -> dict:
    """--chain: the chain's outputs against the kernels', then µs a layer for each way of running the layers."""
    eps = config.rms_norm_eps
    layers = [layer_weights(config) for _ in range(LAYERS)]
    attention = torch.randn(rows, config.num_attention_heads * config.head_dim, device="cuda",
                            dtype=torch.bfloat16)
    residual = torch.randn(rows, config.hidden_size, device="cuda", dtype=torch.bfloat16)

    def new_state():  # one for each chain (project_chain)
        return few_row_linear.new_chain_state(torch.device("cuda"))

    layer_states, three_states = [new_state() for _ in layers], [new_state() for _ in layers]
    all_layers_state = new_state()
    results = {"rows": rows, "checks": []}
    expected = kernels_layer(layers[0], attention, residual, eps)
    got = few_row_linear.project_chain(attention, chain_steps(layers[0], residual, eps), layer_states[0])
    for name, a, b in zip(("o_proj", "gate/up", "down_proj", "q/k/v"), got, expected):
        difference = (a.float() - b.float()).abs().max().item()
        results["checks"].append({"step": name, "max_abs_difference": difference,
                                  "max_abs_value": b.float().abs().max().item()})
        print(f"chain vs kernels, {name}: max |difference| {difference:.4g} (values up to "
              f"{b.float().abs().max().item():.3g})", flush=True)
    weight_bytes = sum(layers[0][name].numel() * 2 for name in ("o", "gate_up", "down", "qkv"))
    floor = weight_bytes / (bandwidth * 1e3)
    every_step = [s for layer in layers for s in chain_steps(layer, residual, eps)]
    variants = {
        "four kernels a layer": [lambda layer=layer: kernels_layer(layer, attention, residual, eps) for layer in layers],
        "chain kernel a layer": [lambda layer=layer, state=state: few_row_linear.project_chain(
            attention, chain_steps(layer, residual, eps), state) for layer, state in zip(layers, layer_states)],
        "chain of three + q/k/v kernel": [lambda layer=layer, state=state: (few_row_linear.project_chain(
            attention, chain_steps(layer, residual, eps, with_qkv=False), state), few_row_linear.project_rows(
            residual, layer["qkv"], None, layer["attention_norm"], eps, "none"))
            for layer, state in zip(layers, three_states)],
        "one chain, all 28 layers": [lambda: few_row_linear.project_chain(attention, every_step, all_layers_state)],
    }
    results["floor_us_per_layer"] = floor
    results["us_per_layer"] = {}
    for name, calls in variants.items():
        try:
            per_layer = graph_us(calls) * len(calls) / LAYERS
        except RuntimeError as error:
            print(f"{name}: {error}", flush=True)
            continue
        results["us_per_layer"][name] = per_layer
        print(f"{name}: {per_layer:.1f} us a layer", flush=True)
    print(f"\n| {rows} token rows, 28 layers | us a layer | / copy floor |\n| --- | ---: | ---: |")
    for name, us in results["us_per_layer"].items():
        print(f"| {name} | {us:.1f} | {us / floor:.2f}x |")
    print(f"| copy floor ({weight_bytes / 1e6:.1f} MB a layer) | {floor:.1f} | |")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dice-1.7b")
    parser.add_argument("--out", default=None)
    parser.add_argument("--chain", type=int, default=0, metavar="ROWS",
                        help="time the chain kernel against the kernels, at ROWS token rows")
    args = parser.parse_args(argv)
    assert few_row_linear.available(torch.device("cuda")), "the kernels did not build (see the log)"
    config = DiceConfig.from_name(args.preset)
    bandwidth = copy_bandwidth_gbs("cuda")
    print(f"copy bandwidth {bandwidth:.0f} GB/s", flush=True)
    if args.chain:
        torch.manual_seed(0)
        results = chain_main(config, bandwidth, args.chain)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
        return 0
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
