"""Decoding speed: our block-diffusion engine vs AR decoding in transformers and the reference SDAR loop.

One run, one GPU, random weights at a DICE shape (no weights can be downloaded). Prints a table with ratios
and writes JSON to --out. See BENCHMARKS.md for recorded results.

    python bench/decode.py --out decode.json            # DICE-1.7B shape at batch 1/16, SDAR-4B at batch 128
"""

import argparse
import ast
import functools
import json
import statistics
import sys
import time
from typing import Callable

import torch
import torch._inductor.config

from dice_copilot.model import few_row_linear, network
from dice_copilot.model.config import DiceConfig
from dice_copilot.model.engine import BlockDiffusionEngine, ContinuousBatcher
from dice_copilot.model.masks import block_causal_mask
from dice_copilot.model.network import (DiceForBlockDiffusion, KVCache, few_query_attention,
                                        fused_few_query_attention, small_query_attention)


class _NoTokenizer:
    """The bench feeds token ids and reads token ids; nothing is decoded to text."""

    stop_token_ids: list[int] = []

    def encode(self, text):
        raise TypeError("bench prompts are token ids")

    def decode(self, ids):
        return ""


def cuda_time_ms(fn, repeats: int, warmup: int = 3) -> float:
    """Median wall time of fn on the GPU, by CUDA events around each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs(device) -> float:
    """Device copy bandwidth (bytes read + written per second), the memory floor's denominator."""
    n = 1 << 30  # 2 GiB of bf16 each way
    src = torch.empty(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src), repeats=20)
    del src, dst
    return 2 * n * 2 / (ms / 1e3) / 1e9


def build_model(preset: str, device) -> DiceForBlockDiffusion:
    config = DiceConfig.from_name(preset)
    with torch.device(device):
        model = DiceForBlockDiffusion(config)
    return model.to(torch.bfloat16).eval()


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def forward_latency_ms(engine: BlockDiffusionEngine, context: int) -> float:
    """One denoising pass (2 blocks of queries) at batch 1 over `context` cached tokens, graph-replayed."""
    config = engine.config
    size = config.block_size
    cache = KVCache(config, 1, context + 4 * size, engine.device, torch.bfloat16)
    positions = (torch.arange(-size, size, device=engine.device) + context)[None]
    ids = torch.randint(0, config.vocab_size, positions.shape, device=engine.device)
    cache.length = engine.runner.attended_length(context + size, cache.max_length)
    ms = cuda_time_ms(lambda: engine.runner(ids, positions, cache, slice(size, 2 * size)), repeats=50)
    engine.runner.release(cache)
    return ms


def attention_us(config: DiceConfig, batch: int, context: int, device) -> dict:
    """One layer's few-query attention (2 blocks of queries over `context` cached keys), fused kernel (with the
    tile size it picks, and with each tile size) vs two matmuls + softmax: µs per call, each timed as a CUDA graph
    of 28 calls (a model's layers) so launches overlap as in a denoising pass."""
    size, d = config.block_size, config.head_dim
    q = torch.randn(batch, 2 * size, config.num_attention_heads, d, device=device, dtype=torch.bfloat16).transpose(1, 2)
    cache = torch.randn(2, batch, config.num_key_value_heads, context + 4 * size, d, device=device,
                        dtype=torch.bfloat16)
    k, v = cache[0, :, :, : context + size], cache[1, :, :, : context + size]
    positions = (torch.arange(-size, size, device=device) + context)[None].expand(batch, -1)
    mask = block_causal_mask(positions, torch.arange(context + size, device=device), size)
    out = {}
    variants = [("fused", few_query_attention), ("matmuls", small_query_attention)]
    if fused_few_query_attention is not None:  # Triton is there: sweep the kernel's tile sizes too
        from dice_copilot.model.attention_kernels import TILE_SIZES

        variants += [(f"fused_tile{tile}", functools.partial(fused_few_query_attention, tile_keys=tile))
                     for tile in TILE_SIZES]
    for name, fn in variants:
        for _ in range(2):
            fn(q, k, v, mask, config.num_key_value_heads)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(28):
                fn(q, k, v, mask, config.num_key_value_heads)
        out[name] = cuda_time_ms(graph.replay, repeats=20) * 1e3 / 28
    return out


PROFILED = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]


def profile_forward(engine: BlockDiffusionEngine, context: int, path: str) -> None:
    """Kernel-level breakdown of one denoising pass (the compiled model without the graph, so each kernel shows),
    written as a table sorted by GPU time: where the gap to the memory floor goes."""
    config = engine.config
    size = config.block_size
    cache = KVCache(config, 1, context + 4 * size, engine.device, torch.bfloat16)
    positions = (torch.arange(-size, size, device=engine.device) + context)[None]
    ids = torch.randint(0, config.vocab_size, positions.shape, device=engine.device)
    cache.length = context + size
    mask = block_causal_mask(positions, torch.arange(cache.length, device=engine.device), size)
    forward = engine.runner._forward
    with torch.inference_mode():
        for _ in range(3):
            forward(ids, positions, attn_mask=mask, kv_cache=cache, logits_slice=slice(size, 2 * size))
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=PROFILED) as prof:
            for _ in range(5):
                forward(ids, positions, attn_mask=mask, kv_cache=cache, logits_slice=slice(size, 2 * size))
            torch.cuda.synchronize()
    with open(path, "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))
    profile_pass(engine, context, path)


def profile_pass(engine: BlockDiffusionEngine, context: int, path: str) -> None:
    """The same for a whole denoising pass at batch 1 (forward, sampling, commits, row state), run without its
    graph: the kernels that are not the forward's, and how many kernels the graph replays (each costs a gap)."""
    prompt = random_prompts(1, context, engine.config.vocab_size)[0]
    with ContinuousBatcher(engine, slots=1, max_length=context + 256) as batcher:
        batcher.submit(prompt, 128, stop=[])
        batcher.step()  # admit and prefill, one pass
        with torch.inference_mode():
            for _ in range(3):
                batcher._pass()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    batcher._pass()
                torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.time_range.elapsed_us() for e in kernels) / 5
    with open(path, "a") as f:
        f.write(f"\n\nwhole denoising pass, batch 1: {len(kernels) / 5:.0f} kernels, {gpu_us:.0f} us of GPU time per "
                f"pass\n")
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=60))
    print(f"profiled pass: {len(kernels) / 5:.0f} kernels, {gpu_us:.0f} us GPU time per pass", flush=True)


def random_prompts(batch: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    # Stay clear of the top of the vocabulary, where the special and mask tokens live.
    return torch.randint(0, vocab - 1024, (batch, length), generator=g).tolist()


def ours_tokens_per_s(engine, prompts, new_tokens, threshold, passes_out: dict | None = None) -> tuple[float, float]:
    """(tokens/s, tokens per forward) of one timed generate(); `passes_out` gets the wall time per denoising pass
    (ms, prefill included): set beside the forward latency, the rest of a pass (sampling, commits, the host)."""
    # Warm up with the same lengths, so compilation and graph capture of every length bucket happen before timing.
    engine.generate(prompts, max_new_tokens=new_tokens, strategy="dynamic", threshold=threshold, stop=[])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = engine.generate(prompts, max_new_tokens=new_tokens, strategy="dynamic", threshold=threshold, stop=[])
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    generated = sum(len(g.token_ids) for g in out)
    if passes_out is not None:
        passes_out["ms_per_pass"] = wall * 1e3 / max(g.stats.forward_passes for g in out)
    return generated / wall, statistics.mean(g.stats.tokens_per_forward for g in out)


def reference_sdar_tokens_per_s(model, prompts, new_tokens, threshold) -> float:
    """A faithful re-implementation of SDAR's generate.py loop (eager, block-only denoise passes, a separate
    "save" pass per finished block, dynamic low-confidence remasking), at batch len(prompts)."""
    config = model.config
    size, mask_id = config.block_size, config.mask_token_id
    device = next(model.parameters()).device
    batch, lp = len(prompts), len(prompts[0])
    start = (lp // size) * size
    total = start + -(-(lp - start + new_tokens) // size) * size
    x = torch.full((batch, total), mask_id, device=device)
    x[:, :lp] = torch.tensor(prompts, device=device)
    cache = KVCache(config, batch, total, device, torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        if start:
            cache.length = start
            pos = torch.arange(start, device=device)[None].expand(batch, -1)
            model(x[:, :start], pos, kv_cache=cache, logits_slice=slice(0, 0))
        for b in range(start, total, size):
            pos = torch.arange(b, b + size, device=device)[None].expand(batch, -1)
            cache.length = b + size
            while (x[:, b:b + size] == mask_id).any():
                logits = model(x[:, b:b + size], pos, kv_cache=cache).float()
                probs = torch.softmax(logits, -1)
                conf, tok = probs.max(-1)
                masked = x[:, b:b + size] == mask_id
                conf = conf.masked_fill(~masked, -1.0)
                commit = (conf > threshold) | (conf == conf.max(-1, keepdim=True).values)
                commit &= masked
                x[:, b:b + size] = torch.where(commit, tok, x[:, b:b + size])
            model(x[:, b:b + size], pos, kv_cache=cache, logits_slice=slice(0, 0))  # the save pass
    torch.cuda.synchronize()
    return batch * new_tokens / (time.perf_counter() - t0)


def hf_ar_decoder(model, prompts, new_tokens, compiled: bool) -> Callable[[], float]:
    """transformers' Qwen3 generate() with the same weights — plain, or static cache + torch.compile — built and
    warmed up once; returns a function that times one generate() (tok/s). The model lives as long as it does."""
    import transformers

    config = model.config
    hf_config = transformers.Qwen3Config(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim, rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps, tie_word_embeddings=config.tie_word_embeddings,
        max_position_embeddings=config.max_position_embeddings,
    )
    device = next(model.parameters()).device
    with torch.device(device):
        hf = transformers.Qwen3ForCausalLM(hf_config).to(torch.bfloat16).eval()
    hf.load_state_dict(model.state_dict(), strict=False)
    ids = torch.tensor(prompts, device=device)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if compiled:
        # With a static cache, generate() compiles its decoding step itself (CompileConfig: reduce-overhead,
        # i.e. CUDA graphs); wrapping forward by hand breaks on transformers 5's cache bookkeeping.
        hf.generation_config.cache_implementation = "static"
        for _ in range(2):  # compile and capture at the timed run's cache size (it depends on max_new_tokens)
            hf.generate(ids, **kwargs)
    else:
        hf.generate(ids, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})

    def timed() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = hf.generate(ids, **kwargs)
        torch.cuda.synchronize()
        return ids.shape[0] * (out.shape[1] - ids.shape[1]) / (time.perf_counter() - t0)

    return timed


def hf_ar_tokens_per_s(model, prompts, new_tokens, compiled: bool) -> float:
    """One timed generate() of a freshly built transformers model (see hf_ar_decoder)."""
    tokens_per_s = hf_ar_decoder(model, prompts, new_tokens, compiled)()
    torch.cuda.empty_cache()
    return tokens_per_s


def interleaved_runs(ours: Callable[[], float], baseline: Callable[[], float] | None,
                     repeats: int) -> tuple[list[float], list[float]]:
    """Each timed `repeats` times, alternating, so that a slow spell of the machine (the baseline is host-bound,
    ours GPU-bound: CPU contention slows them unequally) lands on both; tok/s of every run."""
    ours_runs, baseline_runs = [], []
    for _ in range(repeats):
        ours_runs.append(ours())
        if baseline is not None:
            baseline_runs.append(attempt(baseline))
    return ours_runs, [r for r in baseline_runs if r == r]  # failed runs (NaN) dropped


def attempt(fn, *args, **kwargs):
    """A baseline that fails (e.g. a transformers API change on the GPU image) is reported, not fatal."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the bench has one shot on the GPU machine
        print(f"{fn.__name__} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
        return float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dice-1.7b")
    parser.add_argument("--large-preset", default="dice-4b", help="shape for the batch-128 throughput row")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--ar-new-tokens", type=int, default=64, help="plain generate() is slow: fewer tokens")
    parser.add_argument("--skip", default="", help="comma list of rows to skip: compiled,plain,reference,"
                        "small (the whole DICE-1.7B part),large, and of forward-latency rows: eager (the uncompiled "
                        "graph),separate (the attention inputs without their fused op),chain (one few-row kernel a "
                        "projection instead of a chain kernel a layer),cublas (the projections on cuBLAS instead of "
                        "the few-row kernels),attention (the kernel timings)")
    parser.add_argument("--batches", default="1,16", help="comma list of batch sizes for the DICE-1.7B rows "
                        "('': forward latency rows only)")
    parser.add_argument("--compile-mode", default=None, help="also time the forward compiled with this "
                        "torch.compile mode (e.g. max-autotune-no-cudagraphs)")
    parser.add_argument("--inductor-option", action="append", default=[], metavar="KEY=VALUE",
                        help="also time the forward compiled with this Inductor option (repeatable; e.g. "
                        "triton.enable_pdl=True: programmatic dependent launch)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of the batch-1 forward (a graph captured for each), and of ours (tau 0.9) "
                        "and the compiled AR baseline, alternating; medians reported")
    parser.add_argument("--shape-sweep", nargs="?", const="q/k/v,o_proj,gate/up,down_proj", default=None,
                        metavar="PROJECTIONS",
                        help="also time the batch-1 forward with each projection's few-row launch shape changed, one "
                        "projection at a time (the shapes that are fastest alone need not be inside the forward); "
                        "optionally only these projections (comma list; default all four)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", default=None, metavar="FILE",
                        help="also write a per-kernel GPU-time table of one compiled denoising pass to FILE")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/decode.py needs a CUDA device", file=sys.stderr)
        return 2
    skip = set(filter(None, args.skip.split(",")))
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    results: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "preset": args.preset}

    bandwidth = copy_bandwidth_gbs(device)
    results["copy_bandwidth_gbs"] = bandwidth
    if "small" not in skip:
        latency, floor_ms, eager_graph_ms, rows = small_model_rows(args, skip, device, bandwidth, results)
    if "large" not in skip:
        results["batch128"] = large_batch_row(args, device)

    print()
    print(f"GPU {results['gpu']}, torch {results['torch']}, {args.preset} shape, random bf16 weights")
    print(f"{'measure':<44}{'ours':>12}{'baseline':>12}{'ratio':>8}")
    if "small" not in skip:
        print(f"{'forward latency b=1 (ms) vs memory floor':<44}{latency:>12.3f}{floor_ms:>12.3f}"
              f"{latency / floor_ms:>8.2f}")
        variants = [  # the same forward, changed one way each (rows that ran)
            (f"  same, compiled with {args.compile_mode}", results.get("forward_ms_compile_mode", {}).get("ms")),
            ("  same, Inductor " + ",".join(args.inductor_option),
             results.get("forward_ms_inductor_options", {}).get("ms")),
            ("  same, rotary and cache writes unfused", results.get("forward_ms_separate_rotary_cache")),
            ("  same, a few-row kernel a projection (no chain)", results.get("forward_ms_without_chain")),
            ("  same, projections on cuBLAS", results.get("forward_ms_cublas_projections")),
            ("  same, CUDA graph of the uncompiled model", eager_graph_ms),
        ]
        for label, ms in variants:
            if ms is not None:
                print(f"{label:<44.44}{ms:>12.3f}{floor_ms:>12.3f}{ms / floor_ms:>8.2f}")
        for sweep in results.get("forward_ms_by_launch_shape", []):
            label = f"  same, {sweep['projection']} launched as {sweep['shape']}"
            print(f"{label:<44.44}{sweep['ms']:>12.3f}{floor_ms:>12.3f}{sweep['ms'] / floor_ms:>8.2f}")
        for batch, times in results.get("attention_us", {}).items():
            label = f"attention/layer b={batch} 1k ctx (us) fused vs matmuls"
            fused, matmuls = times["fused"], times["matmuls"]
            print(f"{label:<44}{fused:>12.1f}{matmuls:>12.1f}{fused / matmuls:>8.2f}")
        for row in rows:
            if row["batch"] == 1:
                label = "wall per pass b=1 tau0.9 (ms) vs forward"
                print(f"{label:<44}{row['ms_per_pass_tau0.9']:>12.3f}{latency:>12.3f}"
                      f"{row['ms_per_pass_tau0.9'] / latency:>8.2f}")
                label = "  same, bookkeeping eager (ms) vs compiled"
                eager_ms = row["ms_per_pass_tau0.9_eager_bookkeeping"]
                print(f"{label:<44}{row['ms_per_pass_tau0.9']:>12.3f}{eager_ms:>12.3f}"
                      f"{row['ms_per_pass_tau0.9'] / eager_ms:>8.2f}")
            for base in ("hf_static_compiled", "hf_generate", "reference_sdar"):
                if base in row:
                    for ours in ("ours_tau0.9", "ours_tau0"):
                        label = f"tok/s b={row['batch']} {ours} vs {base}"
                        print(f"{label:<44}{row[ours]:>12.1f}{row[base]:>12.1f}{row[ours] / row[base]:>8.2f}")
    if "batch128" in results:
        r = results["batch128"]
        for ours in ("ours_tau0.9", "ours_tau0"):
            label = f"tok/s b=128 {r['preset']} {ours} vs JetEngine"
            print(f"{label:<44}{r[ours]:>12.1f}{3700.0:>12.1f}{r[ours] / 3700.0:>8.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


def forward_ms_switched_off(model: DiceForBlockDiffusion, module, switch: str) -> float:
    """Batch-1 forward latency of a fresh engine with the module's boolean `switch` off (back on afterwards)."""
    setattr(module, switch, False)
    try:
        engine = BlockDiffusionEngine(model, _NoTokenizer())
        return forward_latency_ms(engine, context=1024)
    finally:
        setattr(module, switch, True)


def launch_shape_sweep(model: DiceForBlockDiffusion, swept: list[str]) -> list[dict]:
    """Batch-1 forward latency with one projection's few-row launch shape (tiles per CTA, warps) replaced at a time,
    for the projections named in `swept`, the others as launch_shape picks them; the first entry is the heuristic's
    own choice, timed again."""
    c = model.config
    projections = {  # name -> (epilogue, norm fused, K, outputs)
        "q/k/v": ("none", True, c.hidden_size, (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim),
        "o_proj": ("residual", False, c.num_attention_heads * c.head_dim, c.hidden_size),
        "gate/up": ("silu_mul", True, c.hidden_size, c.intermediate_size),
        "down_proj": ("residual", False, c.intermediate_size, c.hidden_size),
    }
    kinds = {spec[:3]: name for name, spec in projections.items()}  # (epilogue, norm fused, K) -> name
    project_rows = few_row_linear.project_rows
    unknown = set(swept) - set(projections)
    if unknown:
        raise SystemExit(f"--shape-sweep: unknown projections {sorted(unknown)}; known: {list(projections)}")
    trials = [(None, None)] + [(name, shape) for name, (epilogue, norm, _, n_out) in projections.items()
                               if name in swept for shape in few_row_linear.LAUNCH_SHAPES
                               if few_row_linear.shape_fits(shape, n_out, epilogue, norm)]
    results = []
    for name, shape in trials:
        def with_shape(x, weight, residual, norm_weight, eps, epilogue, chosen=None, name=name, shape=shape):
            kind = kinds.get((epilogue, norm_weight is not None, x.shape[1]))
            return project_rows(x, weight, residual, norm_weight, eps, epilogue, shape if kind == name else chosen)
        few_row_linear.project_rows = with_shape
        try:
            engine = BlockDiffusionEngine(model, _NoTokenizer())
            ms = forward_latency_ms(engine, context=1024)
        finally:
            few_row_linear.project_rows = project_rows
        del engine
        results.append({"projection": name or "every projection", "shape": shape or "heuristic", "ms": ms})
        print(json.dumps(results[-1]), flush=True)
    return results


def inductor_options(pairs: list[str]) -> dict:
    """KEY=VALUE strings as torch._inductor.config.patch's dict, values parsed as Python literals (1, True, 'x')."""
    options = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


def small_model_rows(args, skip, device, bandwidth, results):
    """Forward latency vs the memory floor, then tokens/s at batch 1 and 16 against the AR baselines."""
    model = build_model(args.preset, device)
    eager_graph_ms = None
    if "eager" not in skip:
        eager_graphs = BlockDiffusionEngine(model, _NoTokenizer(), compile=False)
        eager_graph_ms = forward_latency_ms(eager_graphs, context=1024)
        del eager_graphs
    engine = BlockDiffusionEngine(model, _NoTokenizer())
    floor_ms = weight_bytes(model) / (bandwidth * 1e9) * 1e3
    # A fresh graph per run: one capture's figure varied by up to 0.07 ms from another's on the same machine.
    runs = [forward_latency_ms(engine, context=1024) for _ in range(args.repeats)]
    latency = statistics.median(runs)
    results.update(copy_bandwidth_gbs=bandwidth, weight_gb=weight_bytes(model) / 1e9, floor_ms=floor_ms,
                   forward_ms=latency, forward_ms_runs=runs, forward_ms_graph_without_compile=eager_graph_ms)
    print(f"forward at batch 1: {latency:.3f} ms (median of {' / '.join(f'{r:.3f}' for r in runs)}) vs floor "
          f"{floor_ms:.3f} ms ({latency / floor_ms:.2f}x)", flush=True)
    if args.compile_mode:
        started = time.perf_counter()
        tuned = BlockDiffusionEngine(model, _NoTokenizer(), compile_mode=args.compile_mode)
        results["forward_ms_compile_mode"] = {"mode": args.compile_mode, "ms": forward_latency_ms(tuned, 1024),
                                              "compile_s": time.perf_counter() - started}
        print(f"forward at batch 1 compiled with mode {args.compile_mode}: {results['forward_ms_compile_mode']}",
              flush=True)
        del tuned
    if args.inductor_option:
        options = inductor_options(args.inductor_option)
        with torch._inductor.config.patch(options):
            optioned = BlockDiffusionEngine(model, _NoTokenizer())
            results["forward_ms_inductor_options"] = {"options": options, "ms": forward_latency_ms(optioned, 1024)}
        del optioned
        print(f"forward at batch 1 with Inductor options: {results['forward_ms_inductor_options']}", flush=True)
    if args.profile:
        profile_forward(engine, 1024, args.profile)
    if "separate" not in skip:  # the same forward with QK-norm, rotary and the cache writes as separate steps
        results["forward_ms_separate_rotary_cache"] = forward_ms_switched_off(model, network, "FUSED_ROTARY_CACHE")
        print(f"forward at batch 1 with the separate steps: {results['forward_ms_separate_rotary_cache']:.3f} ms",
              flush=True)
    if "chain" not in skip:  # the same forward with one few-row kernel a projection (no layer_tail chains)
        results["forward_ms_without_chain"] = forward_ms_switched_off(model, few_row_linear, "CHAIN_ENABLED")
        print(f"forward at batch 1 without the chain kernel: {results['forward_ms_without_chain']:.3f} ms",
              flush=True)
    if "cublas" not in skip:  # the same forward with every projection on cuBLAS (no few-row kernels)
        results["forward_ms_cublas_projections"] = forward_ms_switched_off(model, few_row_linear, "ENABLED")
        print(f"forward at batch 1 with cuBLAS projections: {results['forward_ms_cublas_projections']:.3f} ms",
              flush=True)
    if args.shape_sweep:
        results["forward_ms_by_launch_shape"] = launch_shape_sweep(model, args.shape_sweep.split(","))
    if "attention" not in skip:
        results["attention_us"] = {b: attention_us(model.config, b, 1024, device) for b in (1, 16)}
        print(f"attention per layer (us), fused vs matmuls: {results['attention_us']}", flush=True)

    vocab = model.config.vocab_size
    rows = []
    for batch in (int(b) for b in args.batches.split(",") if b):
        prompts = random_prompts(batch, args.prompt_tokens, vocab)
        row = {"batch": batch}
        passes: dict = {}
        pass_ms: list[float] = []
        baseline = None if "compiled" in skip else attempt(hf_ar_decoder, model, prompts, args.new_tokens, True)
        baseline = baseline if callable(baseline) else None

        def ours() -> float:
            tokens_per_s, row["tpf_tau0.9"] = ours_tokens_per_s(engine, prompts, args.new_tokens, 0.9, passes)
            pass_ms.append(passes["ms_per_pass"])
            return tokens_per_s

        row["ours_tau0.9_runs"], row["hf_static_compiled_runs"] = interleaved_runs(ours, baseline, args.repeats)
        row["ours_tau0.9"] = statistics.median(row["ours_tau0.9_runs"])
        row["ms_per_pass_tau0.9"] = statistics.median(pass_ms)
        if row["hf_static_compiled_runs"]:
            row["hf_static_compiled"] = statistics.median(row["hf_static_compiled_runs"])
        del baseline
        torch.cuda.empty_cache()
        if batch == 1:  # what compiling the pass's bookkeeping buys: the same pass with it eager
            engine.runner.compile_bookkeeping(False)
            engine.runner.release(engine._kept.cache)  # recapture the pass graphs with the eager bookkeeping
            ours_tokens_per_s(engine, prompts, args.new_tokens, 0.9, passes)
            row["ms_per_pass_tau0.9_eager_bookkeeping"] = passes["ms_per_pass"]
            engine.runner.compile_bookkeeping(True)
            engine.runner.release(engine._kept.cache)
        # Threshold 0 commits whole blocks: the tokens/s a confident (trained) model approaches.
        row["ours_tau0"], row["tpf_tau0"] = ours_tokens_per_s(engine, prompts, args.new_tokens, 0.0)
        if "reference" not in skip:
            row["reference_sdar"] = attempt(reference_sdar_tokens_per_s, model, prompts, args.ar_new_tokens, 0.9)
        if "plain" not in skip:
            row["hf_generate"] = attempt(hf_ar_tokens_per_s, model, prompts, args.ar_new_tokens, compiled=False)
        rows.append(row)
        print(json.dumps(row), flush=True)
    results["rows"] = rows
    del engine, model
    torch.cuda.empty_cache()
    return latency, floor_ms, eager_graph_ms, rows


def large_batch_row(args, device) -> dict:
    """Throughput at batch 128 at the larger shape (JetEngine's published setting)."""
    large = build_model(args.large_preset, device)
    large_engine = BlockDiffusionEngine(large, _NoTokenizer())
    prompts = random_prompts(128, 256, large.config.vocab_size)
    tps, tpf = ours_tokens_per_s(large_engine, prompts, args.new_tokens, 0.9)
    print(f"batch 128 {args.large_preset}: tau=0.9 {tps:.0f} tok/s", flush=True)
    tps0, tpf0 = ours_tokens_per_s(large_engine, prompts, args.new_tokens, 0.0)
    return {"preset": args.large_preset, "ours_tau0.9": tps, "tpf_tau0.9": tpf, "ours_tau0": tps0, "tpf_tau0": tpf0,
            "jetengine_published": 3700.0}


if __name__ == "__main__":
    sys.exit(main())
