"""The block-diffusion objective (docs/decoding.md#block-diffusion-sft): the [x_t ‖ x_0] mask leaks nothing, the noise
follows its rule, the loss is CE/p unshifted."""

import math

import pytest
import torch

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.network import DiceForBlockDiffusion
from dice_copilot.trainer.sft_data import SFTSample, collate_rows
from dice_copilot.trainer.sft_loss import (
    FlexMaskBuilder,
    NoisedBatch,
    add_noise,
    attention_pairs,
    dense_diffusion_mask,
    diffusion_loss_sum,
    noisy_half_logits,
)

from float_tolerance import attention_terms, tolerance

MASK_ID = 3
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def two_sample_batch():
    """Row 0: sample A (12 tokens, 3 of prompt) then sample B (8 tokens, 2 of prompt) and 4 filler tokens."""
    a = SFTSample(tuple(range(10, 22)), 3)
    b = SFTSample(tuple(range(30, 38)), 2)
    return collate_rows([a, b], [[0, 1]], [0], seq_len=24, pad_token_id=0)


def test_dense_mask_is_the_three_part_block_diffusion_mask():
    batch = collate_rows([SFTSample(tuple(range(1, 9)), 2)], [[0]], [0], seq_len=8, pad_token_id=0)
    mask = dense_diffusion_mask(batch, block_size=4)[0, 0].int()
    one, zero = torch.ones(4, 4, dtype=torch.int), torch.zeros(4, 4, dtype=torch.int)
    expected = torch.cat([
        #          noisy b0, noisy b1, clean b0, clean b1
        torch.cat([one, zero, zero, zero], 1),  # noisy block 0: itself only
        torch.cat([zero, one, one, zero], 1),   # noisy block 1: itself + clean block 0
        torch.cat([zero, zero, one, zero], 1),  # clean block 0: itself
        torch.cat([zero, zero, one, one], 1),   # clean block 1: clean blocks 0..1
    ])
    assert torch.equal(mask, expected)


def test_packed_samples_never_see_each_other_and_pair_count_matches_the_mask():
    batch = two_sample_batch()
    mask = dense_diffusion_mask(batch, 4)[0, 0]
    segments = torch.cat([batch.segment_ids[0], batch.segment_ids[0]])
    assert not (mask & (segments[:, None] != segments[None, :])).any()
    assert mask.any(dim=1).all()  # every query (filler too) attends somewhere: no NaN rows
    samples = segments < 2  # the filler after the two samples is segment 2
    assert attention_pairs(batch.sample_lengths[0], 4) == int(mask[samples][:, samples].sum())


def tiny_model(seed=0):
    torch.manual_seed(seed)
    config = DiceConfig.from_name("tiny", vocab_size=64, mask_token_id=MASK_ID, eos_token_id=0, pad_token_id=0)
    return DiceForBlockDiffusion(config).eval()


def noisy_logits(model, batch, noised):
    with torch.no_grad():
        return noisy_half_logits(model, batch, noised, dense_diffusion_mask(batch, 4))


def test_no_information_leak_into_noisy_block_logits():
    """Noisy block b of a sample may depend on its own noisy block and its clean blocks < b, nothing else."""
    model = tiny_model()
    batch = two_sample_batch()
    noised = add_noise(batch, MASK_ID, eps=1e-3, max_retries=10, run_seed=0)
    block = slice(4, 8)  # sample A's block 1
    reference = noisy_logits(model, batch, noised)[0, block]

    def logits_after(change_clean=None, change_noisy=None):
        clean, noisy = batch.input_ids.clone(), noised.noisy_ids.clone()
        if change_clean is not None:
            clean[0, change_clean] = 50 + torch.arange(len(range(*change_clean.indices(24)))) % 10
        if change_noisy is not None:
            noisy[0, change_noisy] = 50 + torch.arange(len(range(*change_noisy.indices(24)))) % 10
        changed = collate_rows([SFTSample(tuple(clean[0, :12].tolist()), 3),
                                SFTSample(tuple(clean[0, 12:20].tolist()), 2)], [[0, 1]], [0], 24, 0)
        return noisy_logits(model, changed, NoisedBatch(noisy, noised.masked, noised.mask_prob))[0, block]

    # Clean tokens of block 1 and later, noisy tokens of later blocks, and all of sample B: no effect.
    assert torch.allclose(logits_after(change_clean=slice(4, 12)), reference, atol=1e-6)
    assert torch.allclose(logits_after(change_noisy=slice(8, 12)), reference, atol=1e-6)
    assert torch.allclose(logits_after(change_clean=slice(12, 24), change_noisy=slice(12, 24)), reference, atol=1e-6)
    # Controls: the clean prefix block and the block's own noisy tokens do reach the logits.
    assert not torch.allclose(logits_after(change_clean=slice(0, 4)), reference, atol=1e-4)
    assert not torch.allclose(logits_after(change_noisy=slice(4, 8)), reference, atol=1e-4)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_block_mask_gives_the_same_attention_as_the_dense_mask():
    from torch.nn.attention.flex_attention import flex_attention

    batch = collate_rows([SFTSample(tuple(range(1, 13)), 5), SFTSample(tuple(range(1, 9)), 2)],
                         [[0, 1], [1]], [0, 1], seq_len=24, pad_token_id=0)
    build = FlexMaskBuilder()
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 48, 16) for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense_diffusion_mask(batch, 4))
    close = tolerance(torch.float32, attention_terms(16, 48), v.abs().max())
    assert torch.allclose(flex_attention(q, k, v, block_mask=build(batch, 4)), dense, **close)
    # The builder refills its buffers for the next batch rather than keeping the first one's layout.
    other = collate_rows([SFTSample(tuple(range(1, 21)), 1)], [[0], [0]], [2, 3], seq_len=24, pad_token_id=0)
    dense_other = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense_diffusion_mask(other, 4))
    assert torch.allclose(flex_attention(q, k, v, block_mask=build(other, 4)), dense_other, **close)


def test_noise_never_masks_prompt_or_filler_and_p_is_per_sample():
    batch = two_sample_batch()
    for row_seed in range(20):
        batch.stream_rows = [row_seed]
        noised = add_noise(batch, MASK_ID, eps=1e-3, max_retries=10, run_seed=7)
        assert not (noised.masked & ~batch.answer_mask).any()
        assert torch.equal(noised.noisy_ids[noised.masked], torch.full((int(noised.masked.sum()),), MASK_ID))
        assert torch.equal(noised.noisy_ids[~noised.masked], batch.input_ids[~noised.masked])
        for segment in (0, 1):
            in_segment = batch.segment_ids[0] == segment
            assert noised.masked[0][in_segment].any()
            p = noised.mask_prob[0][in_segment]
            assert (p == p[0]).all() and 1e-3 <= float(p[0]) <= 1.0


def test_noise_is_a_function_of_seed_and_stream_row_only():
    batch = two_sample_batch()
    first = add_noise(batch, MASK_ID, 1e-3, 10, run_seed=1)
    assert torch.equal(first.masked, add_noise(batch, MASK_ID, 1e-3, 10, run_seed=1).masked)
    batch.stream_rows = [5]
    assert not torch.equal(first.mask_prob, add_noise(batch, MASK_ID, 1e-3, 10, run_seed=1).mask_prob)


def test_every_sample_gets_a_masked_token_even_when_every_draw_misses():
    # 64 one-answer-token samples with eps tiny: most draws of p ~ U(eps,1) still hit, but retries=1 forces misses.
    samples = [SFTSample((5, 6, 7, 8), 3)] * 64
    batch = collate_rows(samples, [list(range(64))], [0], seq_len=256, pad_token_id=0)
    noised = add_noise(batch, MASK_ID, eps=1e-6, max_retries=1, run_seed=0)
    assert int(noised.masked.sum()) == 64
    assert noised.masked[0, 3::4].all()


def test_masked_fraction_matches_the_expected_p():
    samples = [SFTSample(tuple(range(1, 65)), 0)] * 4
    fractions = []
    for row in range(100):
        batch = collate_rows(samples, [[0, 1, 2, 3]], [row], seq_len=256, pad_token_id=0)
        fractions.append(float(add_noise(batch, MASK_ID, 1e-3, 10, run_seed=0).masked.float().mean()))
    assert abs(sum(fractions) / len(fractions) - 0.5) < 0.05  # E[p] = (1 - eps) / 2 + eps


class ScriptedModel(torch.nn.Module):
    """Returns fixed logits built from the clean half of its input, to check alignment and weighting."""

    def __init__(self, vocab, shift):
        super().__init__()
        self.vocab, self.shift = vocab, shift
        self.scale = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, input_ids, position_ids, attn_mask=None, logits_slice=None):
        length = input_ids.shape[1] // 2
        target = input_ids[:, length:].roll(-self.shift, dims=1)
        return 30.0 * self.scale * torch.nn.functional.one_hot(target, self.vocab).float()


def test_loss_has_no_logit_shift_and_is_weighted_by_one_over_p():
    batch = two_sample_batch()
    noised = add_noise(batch, MASK_ID, 1e-3, 10, run_seed=0)
    aligned, masked = diffusion_loss_sum(ScriptedModel(64, shift=0), batch, noised, None)
    shifted, _ = diffusion_loss_sum(ScriptedModel(64, shift=1), batch, noised, None)
    assert int(masked) == int(noised.masked.sum()) > 0
    assert float(aligned.detach()) < 1e-6 < 1.0 < float(shifted.detach())

    uniform = ScriptedModel(64, shift=0)
    uniform.scale.data.zero_()  # all-zero logits: CE = log(V) at every position
    loss_sum, _ = diffusion_loss_sum(uniform, batch, noised, None)
    loss_sum = loss_sum.detach()
    expected = math.log(64) * float((1 / noised.mask_prob[noised.masked]).sum())
    assert math.isclose(float(loss_sum), expected, rel_tol=1e-5)
