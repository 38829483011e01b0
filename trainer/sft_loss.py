"""The block-diffusion SFT objective (docs/decoding.md#block-diffusion-sft): noise, the [x_t ‖ x_0] attention mask, the
1/p loss.

For a packed row of L clean tokens x_0 the model sees 2L tokens: the noised copy x_t, then x_0, with the same
position ids in both halves. Noisy block b of a sample attends to its own noisy block and to that sample's clean
blocks < b; clean block b attends to that sample's clean blocks <= b; samples never see each other. The loss is
sum(CE / p) over masked positions of the noisy half (no logit shift: position i predicts token i); the caller
divides it by the number of answer tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .sft_data import CleanBatch

try:
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask
except ImportError:  # pragma: no cover - torch without flex-attention
    BlockMask, create_block_mask = None, None


@dataclass
class NoisedBatch:
    """x_t of a CleanBatch: `noisy_ids` [R,L], `masked` [R,L] (True where x_t holds the mask token), and the
    per-token masking probability `mask_prob` [R,L] (its sample's p)."""

    noisy_ids: torch.Tensor
    masked: torch.Tensor
    mask_prob: torch.Tensor

    def to(self, device) -> "NoisedBatch":
        return NoisedBatch(self.noisy_ids.to(device), self.masked.to(device), self.mask_prob.to(device))


def noise_seed(run_seed: int, stream_row: int) -> int:
    """The noise of a row depends only on the run seed and the row's place in the stream (not on rank or
    accumulation), so runs on different numbers of GPUs and resumed runs draw identical masks."""
    return (run_seed * 0x9E3779B1 + stream_row * 0x85EBCA77 + 1) % (2**63 - 1)


def add_noise(
    batch: CleanBatch, mask_token_id: int, eps: float, max_retries: int, run_seed: int
) -> NoisedBatch:
    """Mask each answer token of each sample with that sample's p = (1-eps)·t + eps, t ~ U(0,1) per sample.

    A sample whose draw masks nothing is redrawn (up to `max_retries` draws, as SDAR does); if all draws miss,
    one of its answer tokens is masked at random. Prompt and filler tokens are never masked.
    """
    rows, length = batch.input_ids.shape
    masked = torch.zeros(rows, length, dtype=torch.bool)
    mask_prob = torch.ones(rows, length)
    for r in range(rows):
        generator = torch.Generator().manual_seed(noise_seed(run_seed, batch.stream_rows[r]))
        segments = batch.segment_ids[r].cpu()
        answer = batch.answer_mask[r].cpu()
        n_segments = int(segments.max()) + 1
        p_segment = (1 - eps) * torch.rand(n_segments, generator=generator) + eps
        p_token = p_segment[segments]
        draws = (torch.rand(max_retries, length, generator=generator) < p_token) & answer
        hits = torch.zeros(max_retries, n_segments).index_add_(1, segments, draws.float()) > 0
        # First draw that masks something, per segment; segments with no hit keep draw 0 and get a forced token.
        first_hit = torch.where(hits.any(0), hits.float().argmax(0), torch.zeros(n_segments, dtype=torch.long))
        row_masked = draws[first_hit[segments], torch.arange(length)]
        has_answer = torch.zeros(n_segments, dtype=torch.bool).index_fill_(0, segments[answer], True)
        forced = ~hits.any(0) & has_answer
        if forced.any():
            scores = torch.rand(length, generator=generator).masked_fill(~answer, -1.0)
            best = torch.full((n_segments,), -2.0).scatter_reduce(0, segments, scores, reduce="amax")
            row_masked |= forced[segments] & answer & (scores == best[segments])
        masked[r] = row_masked
        mask_prob[r] = p_token
    device = batch.input_ids.device
    masked = masked.to(device)
    noisy_ids = batch.input_ids.masked_fill(masked, mask_token_id)
    return NoisedBatch(noisy_ids, masked, mask_prob.to(device))


# `copies` value of a clean token in a layout; noisy tokens carry the index (>= 0) of their noisy copy.
CLEAN = -1


def visible(segments: torch.Tensor, copies: torch.Tensor, blocks: torch.Tensor, b, q, kv):
    """May query q attend to key kv in row b of a layout of noisy copies and one clean copy (all [R, N])? A noisy
    query sees its own copy's block and the clean blocks before it; a clean query sees the clean blocks up to its
    own; tokens of different segments (packed samples) never see each other. Works elementwise on broadcast index
    tensors, so the same rule builds the dense mask and serves as the flex-attention mask_mod."""
    same_sample = segments[b, q] == segments[b, kv]
    q_block, kv_block = blocks[b, q], blocks[b, kv]
    q_copy, kv_copy = copies[b, q], copies[b, kv]
    kv_clean = kv_copy == CLEAN
    noisy_query = (q_copy != CLEAN) & (((kv_copy == q_copy) & (kv_block == q_block)) | (kv_clean & (kv_block < q_block)))
    clean_query = (q_copy == CLEAN) & kv_clean & (kv_block <= q_block)
    return same_sample & (noisy_query | clean_query)


def _doubled_layout(batch: CleanBatch, block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(segments, copies, blocks) of [x_t ‖ x_0]: one noisy copy (0), then the clean one."""
    segments = torch.cat([batch.segment_ids, batch.segment_ids], dim=1)
    blocks = torch.div(torch.cat([batch.position_ids, batch.position_ids], dim=1), block_size, rounding_mode="floor")
    half = batch.input_ids.shape[1]
    copies = torch.full_like(segments, CLEAN)
    copies[:, :half] = 0
    return segments, copies, blocks


def dense_layout_mask(segments: torch.Tensor, copies: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """Boolean mask [R, 1, N, N] (True = may attend) of a layout, for SDPA; memory grows as N²."""
    rows, total = segments.shape
    device = segments.device
    b = torch.arange(rows, device=device)[:, None, None]
    q = torch.arange(total, device=device)[None, :, None]
    kv = torch.arange(total, device=device)[None, None, :]
    return visible(segments, copies, blocks, b, q, kv)[:, None]


def dense_diffusion_mask(batch: CleanBatch, block_size: int) -> torch.Tensor:
    """Boolean mask [R, 1, 2L, 2L] of [x_t ‖ x_0] for SDPA; memory grows as L², so for short rows / CPU."""
    return dense_layout_mask(*_doubled_layout(batch, block_size))


class FlexMaskBuilder:
    """Builds the same mask as a flex-attention BlockMask (sparse 128x128 tiles), for long rows on the GPU.

    Every BlockMask it returns shares one mask_mod reading persistent index buffers (refilled per batch), so the
    compiled layers see the same function each step instead of recompiling for a new closure. The buffers only
    grow: a batch of fewer rows or a shorter width (RL rows vary) fills their leading part, the only part the
    mask_mod reads.
    """

    def __init__(self):
        self._buffers: tuple[torch.Tensor, ...] | None = None
        self._mask_mod = None

    def __call__(self, batch: CleanBatch, block_size: int) -> "BlockMask":
        return self.layout_mask(*_doubled_layout(batch, block_size))

    def layout_mask(self, segments: torch.Tensor, copies: torch.Tensor, blocks: torch.Tensor) -> "BlockMask":
        """The BlockMask of a (segments, copies, blocks) layout, as `dense_layout_mask`."""
        if create_block_mask is None:
            raise RuntimeError("this torch has no flex-attention; set attention_backend = 'dense'")
        rows, total = segments.shape
        current = self._buffers
        if (current is None or current[0].device != segments.device or rows > current[0].shape[0]
                or total > current[0].shape[1]):
            size = (rows, total) if current is None else (max(rows, current[0].shape[0]), max(total, current[0].shape[1]))
            buffers = tuple(torch.zeros(size, dtype=t.dtype, device=t.device) for t in (segments, copies, blocks))

            def mask_mod(b, h, q, kv):
                return visible(*buffers, b, q, kv)

            self._buffers, self._mask_mod = buffers, mask_mod
        for buffer, values in zip(self._buffers, (segments, copies, blocks)):
            buffer[:rows, :total].copy_(values)
        return create_block_mask(
            self._mask_mod, B=rows, H=None, Q_LEN=total, KV_LEN=total, device=segments.device,
            _compile=segments.device.type == "cuda",
        )


def noisy_half_logits(model, batch: CleanBatch, noised: NoisedBatch, attn_mask) -> torch.Tensor:
    """Logits [R, L, V] of the noisy half of [x_t ‖ x_0] (both halves share position ids); the clean half's
    logits are never needed, so `logits_slice` skips its LM head."""
    length = batch.input_ids.shape[1]
    input_ids = torch.cat([noised.noisy_ids, batch.input_ids], dim=1)
    position_ids = torch.cat([batch.position_ids, batch.position_ids], dim=1)
    return model(input_ids, position_ids, attn_mask=attn_mask, logits_slice=slice(0, length))


def diffusion_loss_sum(model, batch: CleanBatch, noised: NoisedBatch, attn_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum over masked answer tokens of CE / p, number of masked tokens) for one micro-batch, as tensors (no
    host sync).

    No logit shift: the logit at noisy position i is scored against clean token i.
    """
    logits = noisy_half_logits(model, batch, noised, attn_mask)
    selected = noised.masked
    ce = F.cross_entropy(logits[selected].float(), batch.input_ids[selected], reduction="none")
    return (ce / noised.mask_prob[selected]).sum(), selected.sum()


def attention_pairs(sample_lengths: list[int], block_size: int) -> int:
    """Query-key pairs the mask allows for these samples (both halves): the useful attention work, for MFU."""
    total = 0
    for n in sample_lengths:
        full_blocks, tail = divmod(n, block_size)
        for block in range(full_blocks + (1 if tail else 0)):
            size = block_size if block < full_blocks else tail
            prefix = block * block_size
            total += size * (prefix + size)  # noisy block: clean prefix + its own noisy block
            total += size * (prefix + size)  # clean block: clean prefix + itself
    return total
