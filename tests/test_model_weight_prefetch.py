"""The L2 weight prefetch plan (model/weight_prefetch.py): what each point asks for, and that the points change no
result and stay where they belong in a compiled forward."""

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.masks import block_causal_mask
from dice_copilot.model.network import DiceForBlockDiffusion, KVCache
from dice_copilot.model.weight_prefetch import CHUNK_BYTES, MATMULS, MAX_LOOKAHEAD_BYTES


def planned_model(**overrides):
    torch.manual_seed(0)
    # Weights larger than a chunk, so that chunking and partial chunks show.
    config = DiceConfig.from_name("tiny", hidden_size=256, intermediate_size=512, head_dim=64, **overrides)
    model = DiceForBlockDiffusion(config).eval()
    model.fuse_projections()
    return model, model.plan_weight_prefetch()


def requested(plan) -> dict:
    """{(layer, matmul): [(weight index in the stream, first byte, end byte), ...]} of the filled tables."""
    spans = {}
    for key, table in plan.tables.items():
        rows = []
        for address, size in table.tolist():
            if size:
                index = next(i for i, (_, _, w) in enumerate(plan.stream)
                             if w.data_ptr() <= address < w.data_ptr() + w.numel() * w.element_size())
                start = address - plan.stream[index][2].data_ptr()
                rows.append((index, start, start + size))
        spans[key] = rows
    return spans


def nbytes(weight) -> int:
    return weight.numel() * weight.element_size()


def test_each_point_asks_for_the_stream_ahead_once():
    model, plan = planned_model()
    sizes = [nbytes(w) for _, _, w in plan.stream]
    lookahead = sizes[2] + sizes[1] // 2  # more than any weight; past the point after qkv: o_proj, most of gate_up
    plan.configure(lookahead)
    spans = requested(plan)
    for rows in spans.values():
        assert all(0 < end - start <= CHUNK_BYTES and (end - start) % 16 == 0 for _, start, end in rows)
    # After layer 0's qkv: all of o_proj, then gate_up up to the lookahead.
    first = spans[(0, "qkv")]
    assert sum(end - start for i, start, end in first if i == 1) == sizes[1]
    assert sum(end - start for i, start, end in first if i == 2) == lookahead - sizes[1]
    # After o_proj: gate_up from where the last point stopped (nothing twice), then down_proj.
    after_o = spans[(0, "o_proj")]
    assert min(start for i, start, _ in after_o if i == 2) == lookahead - sizes[1]
    assert sum(end - start for i, start, end in after_o if i == 3) == lookahead - sizes[2]
    asked = {}
    for rows in spans.values():
        for i, start, end in rows:
            asked.setdefault(i, []).append((start, end))
    for i, ranges in asked.items():
        ranges.sort()
        assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:])), f"weight {i} asked for twice"
    # Every weight after the first is asked for in full (the lookahead is longer than any weight).
    assert sorted(asked) == list(range(1, len(sizes)))
    for i in range(1, len(sizes)):
        assert sum(end - start for start, end in asked[i]) == sizes[i]


def test_points_can_be_switched_off_and_lookahead_zero_asks_for_nothing():
    _, plan = planned_model()
    plan.configure(1 << 20, points=("qkv",))
    spans = requested(plan)
    assert all(bool(rows) == (name == "qkv") for (_, name), rows in spans.items())
    plan.configure(0)
    assert not any(requested(plan).values())
    with pytest.raises(ValueError, match="unknown prefetch points"):
        plan.configure(1 << 20, points=("attention",))
    with pytest.raises(ValueError, match="lookahead"):
        plan.configure(MAX_LOOKAHEAD_BYTES + 1)
    with pytest.raises(ValueError, match="chunk_bytes"):
        plan.configure(1 << 20, chunk_bytes=CHUNK_BYTES + 8)


def test_the_plan_is_shared_needs_fusion_and_is_dropped_by_a_move():
    model, plan = planned_model()
    assert model.plan_weight_prefetch() is plan
    model.to(torch.float64)
    assert all(layer.self_attn.prefetch is None and layer.mlp.prefetch is None for layer in model.model.layers)
    with pytest.raises(RuntimeError, match="fuse_projections"):
        model.plan_weight_prefetch()


def forward_inputs(model, context=24, device="cpu"):
    """A denoising pass's inputs at batch 1: two blocks of queries over `context` cached tokens."""
    config = model.config
    size = config.block_size
    dtype = next(model.parameters()).dtype
    cache = KVCache(config, 1, context + 4 * size, device, dtype)
    cache.length = context + size
    positions = (torch.arange(-size, size, device=device) + context)[None]
    ids = torch.randint(0, config.vocab_size, positions.shape, device=device)
    mask = block_causal_mask(positions, torch.arange(cache.length, device=device), size)
    return ids, positions, mask, cache


def test_compiled_points_follow_their_matmuls_and_change_nothing():
    model, plan = planned_model()
    plan.configure(1 << 20)
    ids, positions, mask, cache = forward_inputs(model)
    with torch.no_grad():
        want = model(ids, positions, attn_mask=mask, kv_cache=cache)
        got, (code, *_) = run_and_get_code(torch.compile(model, dynamic=True), ids, positions, attn_mask=mask,
                                           kv_cache=cache)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    calls = [line.strip() for line in code.splitlines()
             if re.match(r"\s*(extern_kernels\.mm|torch\.ops\.dice\.|cpp_fused)", line)]
    points = [i for i, line in enumerate(calls) if "prefetch_to_l2" in line]
    assert len(points) == len(MATMULS) * model.config.num_hidden_layers
    # Each point right after a matmul (pinned by its declared write to the matmul's output), not hoisted.
    assert all(calls[i - 1].startswith("extern_kernels.mm") for i in points)
    # One join of the side stream, after the LM head's matmul, the forward's last kernel.
    assert calls[-1].startswith("torch.ops.dice.join_prefetches") and calls[-2].startswith("extern_kernels.mm")
    with torch.no_grad():
        model.drop_weight_prefetch()
        torch.testing.assert_close(model(ids, positions, attn_mask=mask, kv_cache=cache), want)


@pytest.mark.gpu
def test_prefetching_on_the_gpu_changes_no_logit_in_a_compiled_graph():
    from dice_copilot.model.engine import BlockDiffusionEngine
    from test_engine import IdTokenizer

    model, _ = planned_model()
    model.to("cuda", torch.bfloat16)
    plain = BlockDiffusionEngine(model, IdTokenizer(), l2_prefetch=0)
    assert plain.prefetch_plan is None
    ids, positions, _, cache = forward_inputs(model, device="cuda")
    logits = slice(model.config.block_size, None)
    want = plain.runner(ids, positions, cache, logits).clone()
    engine = BlockDiffusionEngine(model, IdTokenizer())  # the default on a GPU: compiled, graphs, prefetching
    assert engine.prefetch_plan is not None and engine.prefetch_plan.lookahead > 0
    first = engine.runner(ids, positions, cache, logits).clone()
    torch.testing.assert_close(first, want, rtol=1e-2, atol=1e-2)  # another compilation of the same function
    for lookahead, points in ((MAX_LOOKAHEAD_BYTES, ("qkv",)), (1 << 20, MATMULS), (0, ())):
        engine.prefetch_plan.configure(lookahead, points)  # in place: the captured graph replays the new plan
        got = engine.runner(ids, positions, cache, logits)
        torch.cuda.synchronize()
        assert torch.equal(got, first)
