"""BlockDiffusionEngine: cached block decoding equals full recomputation, strategies, stops, batching."""

import threading

import pytest
import torch

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.engine import (GREEDY_CHUNKS, BlockDiffusionEngine, advance_rows, advance_rows_greedy,
                                      choose_commits, descending_rank, greedy_tokens, sample_tokens)
from dice_copilot.model.masks import block_causal_mask
from dice_copilot.model.network import DiceForBlockDiffusion

from float_tolerance import unit_roundoff

STOP = 0  # the tiny preset's eos id
pytestmark = pytest.mark.usefixtures("single_torch_thread")  # tiny forwards: threads only contend


class IdTokenizer:
    """Token ids as text ("5 17 3"): enough to drive the engine without a trained vocabulary."""

    stop_token_ids = [STOP]

    def encode(self, text):
        return [int(t) for t in text.split()]

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    return DiceForBlockDiffusion(DiceConfig.from_name("tiny", **overrides)).eval()


def commit_schedule(masked, steps):
    """SDAR's even split of a block's masked tokens over the denoising steps."""
    steps = max(1, min(steps, masked))
    return [masked // steps + (1 if s < masked % steps else 0) for s in range(steps)]


def reference_decode(model, prompt, max_new_tokens, steps=None):
    """SDAR's reference loop without a KV cache: recompute the whole sequence each step, greedy, static."""
    cfg = model.config
    size, mask_id = cfg.block_size, cfg.mask_token_id
    steps = steps or size
    lp = len(prompt)
    start = (lp // size) * size
    total = start + -(-(lp - start + max_new_tokens) // size) * size
    x = torch.full((1, total), mask_id)
    x[0, :lp] = torch.tensor(prompt)
    b = start
    while b < total:
        masked = int((x[0, b:b + size] == mask_id).sum())
        for k in commit_schedule(masked, steps) if masked else []:
            seq = x[:, : b + size]
            pos = torch.arange(b + size)[None]
            with torch.no_grad():
                logits = model(seq, pos, attn_mask=block_causal_mask(pos, pos, size))[0, b:b + size]
            logits[:, mask_id] = float("-inf")  # the mask token is never a prediction
            tok, conf = sample_tokens(logits, 0.0, 0, 1.0)
            conf = conf.masked_fill(x[0, b:b + size] != mask_id, float("-inf"))
            chosen = conf.topk(k).indices
            x[0, b + chosen] = tok[chosen]
        if STOP in x[0, max(b, lp):b + size].tolist():
            break
        b += size
    out = x[0, lp:].tolist()
    return out[: out.index(STOP) + 1] if STOP in out else out[:max_new_tokens]


@pytest.mark.parametrize("prompt_len", [1, 4, 7, 9])
def test_cached_decoding_equals_full_recomputation(prompt_len):
    model = tiny_model()
    engine = BlockDiffusionEngine(model, IdTokenizer())
    prompt = list(range(10, 10 + prompt_len))
    got = engine.generate([prompt], strategy="static", max_new_tokens=23, stop=[STOP])[0]
    assert got.token_ids == reference_decode(model, prompt, 23)


def test_static_commits_exactly_k_tokens_per_step():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    for steps, per_step in [(4, 1), (2, 2), (1, 4)]:
        g = engine.generate(["3 4 5 6"], strategy="static", steps_per_block=steps, max_new_tokens=16, stop=[])[0]
        counts = torch.bincount(torch.tensor(g.step_map)).tolist()
        assert counts == [per_step] * (16 // per_step)
        assert g.stats.forward_passes == 16 // per_step


def test_dynamic_commits_every_token_above_threshold_and_at_least_one():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    # Threshold 0: every masked token is above it, so each block finishes in one pass.
    g = engine.generate(["3 4 5 6"], strategy="dynamic", threshold=0.0, max_new_tokens=16, stop=[])[0]
    assert g.stats.forward_passes == 4 and g.stats.tokens_per_forward == 4.0
    # Threshold above 1: nothing passes it, so exactly one token per step (the most confident).
    g = engine.generate(["3 4 5 6"], strategy="dynamic", threshold=1.1, max_new_tokens=16, stop=[])[0]
    assert g.stats.forward_passes == 16


def test_dynamic_commit_choice_follows_confidence():
    confidence = torch.tensor([[0.95, 0.2, 0.91, float("-inf")], [0.1, 0.3, 0.2, 0.4]])
    masked = confidence > float("-inf")
    commit = choose_commits("dynamic", confidence, masked, torch.tensor([1, 1]), 0.9)
    assert commit.tolist() == [[True, False, True, False], [False, False, False, True]]


def test_descending_rank_is_the_place_in_a_stable_descending_sort():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(64, 16, generator=g)
    values[:, 3] = float("-inf")  # a position that cannot commit
    values[:8, 5] = values[:8, 9]  # ties: the earlier position goes first, as a stable sort puts it
    want = values.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
    assert torch.equal(descending_rank(values), want)


def test_sequential_commits_leftmost_masks():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    g = engine.generate(["3 4 5 6 7 8"], strategy="sequential", max_new_tokens=10, stop=[])[0]
    # Prompt tail fills positions 4,5 of block 1; generated positions are then committed left to right.
    assert g.step_map == sorted(g.step_map) and len(set(g.step_map)) == len(g.step_map)


def test_stop_token_ends_the_sequence():
    model = tiny_model()
    engine = BlockDiffusionEngine(model, IdTokenizer())
    free = engine.generate(["3 4 5 6"], strategy="static", max_new_tokens=24, stop=[])[0]
    stop_token = free.token_ids[5]  # a token the model emits at generated position 5
    g = engine.generate(["3 4 5 6"], strategy="static", max_new_tokens=24, stop=[stop_token])[0]
    first = free.token_ids.index(stop_token)
    assert g.finish_reason == "stop"
    assert g.token_ids == free.token_ids[: first + 1]
    assert g.text == " ".join(map(str, free.token_ids[:first]))


def test_length_limit_is_exact():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    g = engine.generate(["3 4 5"], strategy="static", max_new_tokens=6, stop=[])[0]
    assert len(g.token_ids) == 6 and g.finish_reason == "length" and len(g.step_map) == 6


def test_batch_gives_the_same_tokens_as_each_prompt_alone():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    prompts = ["3", "4 5 6 7 8", "9 10 11 12", "13 14 15 16 17 18 19"]
    alone = [engine.generate([p], strategy="dynamic", max_new_tokens=20)[0] for p in prompts]
    together = engine.generate(prompts, strategy="dynamic", max_new_tokens=20)
    for a, t in zip(alone, together):
        assert a.token_ids == t.token_ids and a.step_map == t.step_map


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])  # cuda: a captured pass
def test_a_pass_that_fails_to_compile_runs_eager_and_gives_the_same_tokens(device, caplog):
    def broken_compiler(graph_module, example_inputs):
        raise RuntimeError("a compiler bug at this shape")

    want = BlockDiffusionEngine(tiny_model(), IdTokenizer(), device=device, compile=False).generate(
        ["3 4 5 6 7"], max_new_tokens=12, stop=[])
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer(), device=device, compile=False)
    runner = engine.runner
    runner._forward = torch.compile(runner.model, backend=broken_compiler)
    runner.advance_rows = torch.compile(advance_rows, backend=broken_compiler)
    runner.advance_rows_greedy = torch.compile(advance_rows_greedy, backend=broken_compiler)
    got = engine.generate(["3 4 5 6 7"], max_new_tokens=12, stop=[])
    assert got[0].token_ids == want[0].token_ids
    assert runner._forward is runner.model and runner.advance_rows_greedy is advance_rows_greedy
    assert "torch.compile failed on the denoising pass" in caplog.text


def test_n_candidates_are_prompt_major_and_seeded():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    out = engine.generate(["3 4", "5 6 7"], n=3, temperature=1.0, max_new_tokens=8, seed=7, stop=[])
    assert [g.stats.prompt_tokens for g in out] == [2, 2, 2, 3, 3, 3]
    again = engine.generate(["3 4", "5 6 7"], n=3, temperature=1.0, max_new_tokens=8, seed=7, stop=[])
    assert [g.token_ids for g in out] == [g.token_ids for g in again]
    assert len({tuple(g.token_ids) for g in out[:3]}) > 1  # sampling differs between candidates


def test_streaming_callback_and_cancel():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    cancel = threading.Event()
    updates = []

    def on_block(update):
        updates.append(update)
        if len(updates) == 2:
            cancel.set()

    g = engine.generate(["3 4 5 6"], strategy="static", max_new_tokens=40, stop=[], on_block=on_block,
                        cancel=cancel)[0]
    assert [len(u.token_ids) for u in updates] == [4, 8]
    assert g.finish_reason == "cancelled" and g.token_ids == updates[-1].token_ids


def test_sampling_confidence_uses_unfiltered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    _, conf = sample_tokens(logits, temperature=1.0, top_k=1, top_p=1.0)
    assert conf.item() == pytest.approx(torch.softmax(logits, -1)[0, 0].item())


def test_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    seen = {sample_tokens(logits, 1.0, 0, 0.7, torch.Generator().manual_seed(i))[0].item() for i in range(200)}
    assert seen == {0, 1}


def test_bad_arguments_say_what_to_do():
    engine = BlockDiffusionEngine(tiny_model(), IdTokenizer())
    with pytest.raises(ValueError, match="strategy"):
        engine.generate(["3"], strategy="greedy")
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(["3"], max_new_tokens=10_000)


@pytest.mark.parametrize("vocab", [151936, 1000, 77])
def test_greedy_tokens_choose_and_score_as_sampling_at_temperature_zero(vocab):
    torch.manual_seed(0)
    logits = torch.randn(4, vocab) * 4
    logits[0, 5] = logits[0, vocab - 3] = 50.0  # an exact tie in different slices: the lower id wins
    logits[1, : vocab // 2] = float("-inf")  # whole slices that can never be chosen
    logits[2, :] = 0.0  # all equal: token 0 with probability 1 / V
    want_tokens, want_confidence = sample_tokens(logits, 0.0, 0, 1.0)
    tokens, confidence = greedy_tokens(logits)
    assert torch.equal(tokens, want_tokens)
    assert tokens[0] == 5 and tokens[2] == 0
    # Both scores are the chosen token's probability p = 1 / sum_i exp(l_i - max) in float32 (unit roundoff u).
    # Against p of the same logits in float64, each is off by at most: u * D for rounding the exponents' arguments
    # (D: the farthest finite logit from the max), 2u per exp (one ulp), (n - 1)u per sum of n positive terms in any
    # order (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2), u per product or reciprocal. torch.softmax
    # sums all V terms: (V + D + 3)u, 9e-3 at V = 151,936 (its summation order differs between CPUs: 220u on one AMD
    # EPYC, 435u on another). greedy_tokens sums slices of V / 64 terms, then 64 slice sums rescaled by one exp and
    # one product each: (V / 64 + 63 + D + 6)u, 1.5e-4 at V = 151,936.
    u = unit_roundoff(torch.float32)
    exact = torch.softmax(logits.double(), -1).gather(-1, want_tokens[:, None]).squeeze(-1)
    far = torch.where(torch.isfinite(logits), logits.max(-1, keepdim=True).values - logits, 0.0).max().item()
    slice_terms = -(-vocab // GREEDY_CHUNKS)
    greedy_bound = (slice_terms + GREEDY_CHUNKS - 1 + far + 6) * u
    assert ((confidence.double() - exact).abs() <= greedy_bound * exact).all(), (confidence, exact)
    assert ((want_confidence.double() - exact).abs() <= (vocab + far + 3) * u * exact).all(), (want_confidence, exact)
    compiled = torch.compile(greedy_tokens, dynamic=True)(logits)
    assert torch.equal(compiled[0], want_tokens)
    assert ((compiled[1].double() - exact).abs() <= greedy_bound * exact).all(), (compiled[1], exact)
