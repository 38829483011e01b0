"""TraceRL rows, log-probs and loss on the CPU: the rows reproduce what the engine saw, the mask leaks nothing, the
objective has TraceRL's numbers, advantages are group z-scores."""

import math

import pytest
import torch

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.network import DiceForBlockDiffusion
from dice_copilot.trainer.rl_rewards import group_advantages
from dice_copilot.trainer.rl_trace import (
    TraceSample, collate_trace_rows, policy_logprobs, split_rounds, trace_loss, trace_row,
)
from dice_copilot.trainer.sft_loss import CLEAN, FlexMaskBuilder, dense_layout_mask

from float_tolerance import absolute, logprob_terms, tolerance

MASK, PAD = 511, 0
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def logprob_tolerance(model, rows, want):
    """fp32 log-probs of the same tokens from rows laid out differently: equal up to the order of their sums."""
    keys = collate_trace_rows(rows, PAD).input_ids.shape[1]
    return tolerance(torch.float32, logprob_terms(model.config, keys), max(1.0, want.abs().max()))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    # Untied: with tied embeddings a random model predicts its own input token, which would hide a target left
    # unmasked.
    return DiceForBlockDiffusion(DiceConfig.from_name("tiny", tie_word_embeddings=False)).eval()


class IdTokenizer:
    """Token ids as text: the engine only needs encode/decode for strings, and these tests pass ids."""

    eos_token_id = pad_token_id = PAD
    mask_token_id = MASK
    stop_token_ids = [PAD]

    def encode(self, text):
        return [int(t) for t in text.split()]

    def decode(self, ids):
        return " ".join(map(str, ids))


def copy_of(row, c):
    length = len(row.input_ids) // (row.rounds + 1)
    return row.input_ids[c * length:(c + 1) * length].tolist(), row.targets[c * length:(c + 1) * length].tolist()


def test_each_round_masks_its_block_from_the_pass_that_committed_its_targets():
    # Prompt of 6 tokens: the first generation block holds the prompt tail (positions 4, 5) and two responses tokens.
    sample = TraceSample([10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25, 26], [0, 1, 1, 2, 2, 2, 3], 1.0)
    row = trace_row(sample, block_size=4, mask_id=99, pad_id=0)
    m = 99
    assert row.rounds == 2
    assert copy_of(row, 0) == ([10, 11, 12, 13, 14, 15, m, m, m, m, m, m, m, m, m, m],
                               [0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0])
    assert copy_of(row, 1) == ([10, 11, 12, 13, 14, 15, 20, m, 22, m, m, m, 26, m, m, m],
                               [0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0])
    # The clean copy: the response padded to its block, no targets.
    assert copy_of(row, 2) == ([10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 26, 0, 0, 0], [0] * 16)
    assert row.target_ids.tolist() == [20, 22, 26, 21, 23, 24, 25]
    assert row.copies.tolist() == [0] * 16 + [1] * 16 + [CLEAN] * 16
    assert row.position_ids.tolist() == list(range(16)) * 3


def test_a_response_and_its_steps_must_match():
    with pytest.raises(ValueError, match="3 tokens came with 2 steps"):
        trace_row(TraceSample([1], [2, 3, 4], [0, 1], 1.0), 4, MASK, PAD)


@pytest.mark.parametrize("strategy,threshold", [("static", 0.9), ("sequential", 0.9), ("dynamic", 0.0)])
def test_rows_reproduce_the_contexts_of_the_engines_greedy_commits(model, strategy, threshold):
    """Greedy decoding commits the argmax of the logits it saw, so the rows' logits at each round's targets must
    pick exactly the committed tokens: block alignment (prompt tails of 2 and 1 tokens), masks and the clean prefix
    are the engine's."""
    from dice_copilot.model.engine import BlockDiffusionEngine

    engine = BlockDiffusionEngine(model, IdTokenizer(), device="cpu")
    prompts = [[5, 6, 7, 8, 9, 10], [40, 41, 42, 43, 44, 45, 46, 47, 48]]
    generations = engine.generate(prompts, strategy=strategy, threshold=threshold, max_new_tokens=14, stop=[])
    rows = []
    for prompt, generation in zip(prompts, generations):
        assert len(generation.token_ids) == 14
        rows.append(trace_row(TraceSample(prompt, generation.token_ids, generation.step_map, 1.0), 4, MASK, PAD))
    batch = collate_trace_rows(rows, PAD)
    with torch.no_grad():
        logits = model(batch.input_ids, batch.position_ids, attn_mask=dense_layout_mask(*batch.layout),
                       logits_slice=batch.targets)
    logits[:, MASK] = float("-inf")
    assert torch.equal(logits.argmax(-1), batch.target_ids)
    assert len(batch.target_ids) == 28  # every response token is a target exactly once


def test_noisy_copies_see_neither_later_blocks_nor_each_other(model):
    sample = TraceSample([5, 6, 7, 8, 9], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29], [0, 0, 1, 2, 2, 3, 3, 4, 5, 6], 1.0)
    row = trace_row(sample, 4, MASK, PAD)
    length = len(row.input_ids) // (row.rounds + 1)
    batch = collate_trace_rows([row], PAD)
    mask = dense_layout_mask(*batch.layout)

    def noisy_logits(input_ids):
        with torch.no_grad():
            return model(input_ids[None], batch.position_ids, attn_mask=mask)[0, : row.rounds * length]

    base = noisy_logits(row.input_ids)
    # Clean tokens of block 2 on (positions 8..): noisy blocks 0-2 of every copy must not change.
    changed = row.input_ids.clone()
    clean = row.rounds * length
    changed[clean + 8:] = 77
    after = noisy_logits(changed)
    for c in range(row.rounds):
        assert torch.equal(after[c * length: c * length + 12], base[c * length: c * length + 12])
    assert not torch.equal(after, base)  # later noisy blocks do see those clean tokens
    # Copy 1's tokens: copy 0 must not change.
    changed = row.input_ids.clone()
    changed[length:2 * length] = 78
    assert torch.equal(noisy_logits(changed)[:length], base[:length])


def test_packed_rounds_score_as_one_row_per_round_would(model):
    """All rounds in one row over the shared clean sequence give TraceRL's per-round rows' log-probs exactly (up to
    float summation order): the copies see nothing of each other."""
    sample = TraceSample([5, 6, 7, 8, 9], list(range(20, 33)), [0, 0, 1, 2, 2, 3, 3, 3, 4, 5, 6, 6, 7], 1.0)
    packed = trace_row(sample, 4, MASK, PAD)
    rounds = split_rounds(packed)
    assert packed.rounds == len(rounds) == 4  # block 3's tokens came at 4 passes
    assert sorted(torch.cat([r.target_ids for r in rounds]).tolist()) == sorted(packed.target_ids.tolist())

    def logprobs(rows):
        batch = collate_trace_rows(rows, PAD)
        with torch.no_grad():
            return policy_logprobs(model, batch, dense_layout_mask(*batch.layout), 1.0, MASK)

    # The packed row lists targets copy by copy, as the per-round rows do.
    want = logprobs(rounds)
    assert torch.allclose(logprobs([packed]), want, **logprob_tolerance(model, [packed], want))


def test_padding_a_row_to_a_longer_one_changes_none_of_its_logprobs(model):
    short = trace_row(TraceSample([5, 6, 7], [20, 21, 22], [0, 1, 1], 1.0), 4, MASK, PAD)
    long = trace_row(TraceSample([5, 6, 7, 8, 9, 10], list(range(30, 40)), list(range(10)), -1.0), 4, MASK, PAD)

    def logprobs(rows):
        batch = collate_trace_rows(rows, PAD)
        with torch.no_grad():
            return policy_logprobs(model, batch, dense_layout_mask(*batch.layout), 1.0, MASK)

    together = logprobs([short, long])
    rounded = collate_trace_rows([short, long], PAD, width_multiple=64)
    assert rounded.input_ids.shape == (2, 128) and rounded.segments[1, 80:].tolist() == [1] * 48
    close = logprob_tolerance(model, [short, long], together)
    assert torch.allclose(together[:3], logprobs([short]), **close)
    assert torch.allclose(together[3:], logprobs([long]), **close)
    assert collate_trace_rows([short, long], PAD).target_rows.tolist() == [0] * 3 + [1] * 10


def test_logprobs_are_of_the_sampling_distribution_without_the_mask_token(model):
    row = trace_row(TraceSample([5, 6, 7], [20, 21], [0, 1], 1.0), 4, MASK, PAD)
    batch = collate_trace_rows([row], PAD)
    with torch.no_grad():
        logits = model(batch.input_ids, batch.position_ids, attn_mask=dense_layout_mask(*batch.layout),
                       logits_slice=batch.targets)
        at_half = policy_logprobs(model, batch, dense_layout_mask(*batch.layout), 0.5, MASK)
    scaled = logits / 0.5
    scaled[:, MASK] = float("-inf")
    expected = torch.log_softmax(scaled, -1)[torch.arange(2), batch.target_ids]
    assert torch.allclose(at_half, expected, **logprob_tolerance(model, [row], expected))


def test_trace_loss_at_the_rollout_policy_is_minus_the_advantage_sum():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    advantages = torch.tensor([1.5, 1.5, -0.5])
    terms = trace_loss(logp, logp.detach(), advantages, 0.2, 0.01)
    assert terms.loss.item() == pytest.approx(-2.5)
    assert terms.kl.item() == 0 and terms.clipped.item() == 0 and terms.tokens == 3
    terms.loss.backward()
    # d/dlogp of -ratio * A at ratio 1 is -A; the k3 term has no gradient at the rollout policy.
    assert logp.grad.tolist() == pytest.approx([-1.5, -1.5, 0.5])


def test_trace_loss_clips_the_ratio_where_the_advantage_would_push_it_further():
    old = torch.zeros(4)
    new = torch.tensor([math.log(1.5), math.log(1.5), math.log(0.5), math.log(0.5)], requires_grad=True)
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    terms = trace_loss(new, old, advantages, 0.2, 0.1)
    # ratio 1.5, A > 0: clipped to 1.2 (no gradient); A < 0: -1.5 is the min, kept; ratio 0.5: the mirror image.
    pg = [-1.2, 1.5, -0.5, 0.8]
    kl = [math.exp(-d) - 1 + d for d in new.tolist()]
    # float32 sums of 4 tokens' terms, each made of values up to 2 (the ratios and exp(-Δ)).
    close = absolute(torch.float32, 4, 2.0)
    assert terms.policy_gradient.item() == pytest.approx(sum(pg), abs=close)
    assert terms.kl.item() == pytest.approx(sum(kl), abs=close)
    assert terms.loss.item() == pytest.approx(sum(pg) + 0.1 * sum(kl), abs=close)
    assert terms.clipped.item() == 2
    terms.loss.backward()
    k3_grad = [0.1 * (1 - math.exp(-d)) for d in new.tolist()]
    assert new.grad.tolist() == pytest.approx([k3_grad[0], 1.5 + k3_grad[1], -0.5 + k3_grad[2], k3_grad[3]], abs=close)


def test_group_advantages_are_z_scores_within_each_group():
    advantages = group_advantages([1, 0, 0, 1, 1, 1, 1, 1], 4)
    assert advantages[:4] == pytest.approx([1, -1, -1, 1])
    assert advantages[4:] == [0, 0, 0, 0]  # all alike: nothing to learn
    assert group_advantages([1, 0, 0, 0], 4) == pytest.approx([3 / math.sqrt(3), -1 / math.sqrt(3),
                                                                -1 / math.sqrt(3), -1 / math.sqrt(3)])
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages([1, 0, 0], 4)


def test_one_flex_mask_function_serves_rows_of_every_width(model):
    """RL batches vary in rows and width; the flex-attention mask_mod keeps one closure (compiled layers need not
    recompile for a new one) and matches the dense mask on each batch."""
    builder = FlexMaskBuilder()
    wide = collate_trace_rows([trace_row(TraceSample([5] * 9, list(range(20, 50)), list(range(30)), 1.0), 4, MASK,
                                         PAD)] * 2, PAD)
    narrow = collate_trace_rows([trace_row(TraceSample([5, 6, 7], [20, 21, 22], [0, 1, 1], 1.0), 4, MASK, PAD)], PAD)
    builder.layout_mask(*wide.layout)
    mask_mod = builder._mask_mod
    for batch in (narrow, wide):
        builder.layout_mask(*batch.layout)
        assert builder._mask_mod is mask_mod
        rows, total = batch.segments.shape
        b, q, kv = (torch.arange(n).view(shape) for n, shape in
                    ((rows, (-1, 1, 1)), (total, (1, -1, 1)), (total, (1, 1, -1))))
        assert torch.equal(mask_mod(b, None, q, kv), dense_layout_mask(*batch.layout)[:, 0])
