"""TraceRL's training rows, policy log-probs and clipped objective for block-diffusion rollouts
(docs/decoding.md#tracerl-rows, #tracerl-loss).

A rollout comes from the engine with `step_map`: the denoising pass at which each token was committed. Blocks are
aligned to absolute positions, as the engine decodes them (the prompt tail shares the first block), not counted from
the response start as the released code does (docs/decoding.md#differences-from-the-released-code). Round c of a block
takes the tokens committed at its c-th distinct pass: they are that round's targets, and every token of the block
committed at that pass or later is masked, which is the block the sampler saw when it chose them. All rounds of a
response share its clean sequence, so they go in one row, [noisy copy 0 ‖ ... ‖ noisy copy R-1 ‖ clean prompt +
response], where copy c of block b sees its own block and the clean blocks before b (`sft_loss.visible`); a block with
fewer rounds is clean in the later copies. Positions past the response's end in its last block (cut from the Generation
at the stop token or the length limit) stay masked in every copy and are never targets. Every response token is a
target exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dice_copilot.model.engine import masked_logits

from .sft_loss import CLEAN

# Segment of the padding that fills a short row up to the batch's width (a segment of its own: never seen by the
# row's tokens, and every padding query still sees itself, so no attention row is empty).
PADDING_SEGMENT = 1


@dataclass
class TraceSample:
    """One rollout to train on: token ids as the engine returned them (never re-tokenised text), its commit passes
    and its advantage."""

    prompt_ids: list[int]
    response_ids: list[int]
    step_map: list[int]
    advantage: float


@dataclass
class TraceRow:
    """The packed rounds of one response, all [N] with N = (rounds + 1) * L; L covers prompt + response up to the
    end of the response's last block."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    copies: torch.Tensor  # noisy copy index, or CLEAN
    blocks: torch.Tensor  # absolute block index of each token
    targets: torch.Tensor  # bool: the noisy positions whose logits are scored
    target_ids: torch.Tensor  # [number of targets], in row order
    rounds: int


def trace_row(sample: TraceSample, block_size: int, mask_id: int, pad_id: int) -> TraceRow:
    """The training row of one rollout (see the module docstring)."""
    if len(sample.response_ids) != len(sample.step_map):
        raise ValueError(f"a response of {len(sample.response_ids)} tokens came with {len(sample.step_map)} steps")
    if not sample.response_ids:
        raise ValueError("an empty response has nothing to train on")
    prompt_len, response_len = len(sample.prompt_ids), len(sample.response_ids)
    length = -(-(prompt_len + response_len) // block_size) * block_size
    clean = torch.full((length,), pad_id, dtype=torch.long)
    clean[:prompt_len] = torch.tensor(sample.prompt_ids)
    clean[prompt_len:prompt_len + response_len] = torch.tensor(sample.response_ids)
    # Pass of each position: -1 for the prompt (never masked), "never" past the response (masked throughout).
    never = torch.iinfo(torch.long).max
    steps = torch.full((length,), never, dtype=torch.long)
    steps[:prompt_len] = -1
    steps[prompt_len:prompt_len + response_len] = torch.tensor(sample.step_map)
    block_steps = steps.view(-1, block_size)

    # round_steps[b, c]: the c-th distinct pass of block b's response tokens ("never" where it has fewer rounds).
    distinct = [sorted({s for s in row.tolist() if 0 <= s < never}) for row in block_steps]
    rounds = max(len(d) for d in distinct)
    round_steps = torch.full((length // block_size, rounds), never, dtype=torch.long)
    for b, passes in enumerate(distinct):
        round_steps[b, : len(passes)] = torch.tensor(passes, dtype=torch.long)

    noisy, targets = [], []
    for c in range(rounds):
        start = round_steps[:, c, None]  # [blocks, 1]
        has_round = start != never
        masked = ((block_steps >= start) & has_round) | (block_steps == never)
        noisy.append(torch.where(masked.view(-1), mask_id, clean))
        targets.append(((block_steps == start) & has_round).view(-1))
    positions = torch.arange(length)
    blocks = positions // block_size
    copy_ids = torch.arange(rounds).repeat_interleave(length)
    target_mask = torch.cat(targets + [torch.zeros(length, dtype=torch.bool)])
    input_ids = torch.cat(noisy + [clean])
    return TraceRow(
        input_ids=input_ids,
        position_ids=positions.repeat(rounds + 1),
        copies=torch.cat([copy_ids, torch.full((length,), CLEAN)]),
        blocks=blocks.repeat(rounds + 1),
        targets=target_mask,
        target_ids=clean.repeat(rounds + 1)[target_mask],
        rounds=rounds,
    )


def split_rounds(row: TraceRow) -> list[TraceRow]:
    """The same rounds in TraceRL's own layout, a row each ([noisy copy c ‖ clean]): what the packed row saves
    (bench/rl_trace_rows.py times both; the tests check they give the same log-probs)."""
    length = len(row.input_ids) // (row.rounds + 1)
    clean = slice(row.rounds * length, None)
    rows = []
    for c in range(row.rounds):
        noisy = slice(c * length, (c + 1) * length)
        targets = torch.cat([row.targets[noisy], torch.zeros(length, dtype=torch.bool)])
        input_ids = torch.cat([row.input_ids[noisy], row.input_ids[clean]])
        rows.append(TraceRow(
            input_ids=input_ids, position_ids=row.position_ids[: 2 * length],
            copies=torch.cat([torch.zeros(length, dtype=torch.long), row.copies[clean]]),
            blocks=row.blocks[: 2 * length], targets=targets, target_ids=row.input_ids[clean][row.targets[noisy]],
            rounds=1,
        ))
    return rows


@dataclass
class TraceBatch:
    """Rows padded to one width, all [B, N] but `target_ids` [T] and `target_rows` [T] (the row of each target, to
    broadcast per-response advantages), targets in row-major order."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segments: torch.Tensor
    copies: torch.Tensor
    blocks: torch.Tensor
    targets: torch.Tensor
    target_ids: torch.Tensor
    target_rows: torch.Tensor

    def to(self, device) -> "TraceBatch":
        return TraceBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))

    @property
    def layout(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(segments, copies, blocks), what the attention mask is built from."""
        return self.segments, self.copies, self.blocks


def collate_trace_rows(rows: Sequence[TraceRow], pad_id: int, width_multiple: int = 1) -> TraceBatch:
    """Rows padded to the longest, rounded up to `width_multiple` (few distinct widths: fewer recompilations of
    compiled layers and flex-attention masks)."""
    width = -(-max(len(r.input_ids) for r in rows) // width_multiple) * width_multiple

    def padded(values: list[torch.Tensor], fill) -> torch.Tensor:
        out = torch.full((len(values), width), fill, dtype=values[0].dtype)
        for i, v in enumerate(values):
            out[i, : len(v)] = v
        return out

    segments = torch.full((len(rows), width), PADDING_SEGMENT, dtype=torch.long)
    for i, r in enumerate(rows):
        segments[i, : len(r.input_ids)] = 0
    return TraceBatch(
        input_ids=padded([r.input_ids for r in rows], pad_id),
        position_ids=padded([r.position_ids for r in rows], 0),
        segments=segments,
        copies=padded([r.copies for r in rows], CLEAN),
        blocks=padded([r.blocks for r in rows], 0),
        targets=padded([r.targets for r in rows], False),
        target_ids=torch.cat([r.target_ids for r in rows]),
        target_rows=torch.cat([torch.full((len(r.target_ids),), i) for i, r in enumerate(rows)]),
    )


def policy_logprobs(model, batch: TraceBatch, attn_mask, temperature: float, mask_id: int) -> torch.Tensor:
    """Log-probability [T] of each target token under the distribution the engine samples from: logits / temperature
    with the mask token excluded by the engine's own masked_logits (top-k / top-p filtering is not applied, as in
    TraceRL)."""
    logits = model(batch.input_ids, batch.position_ids, attn_mask=attn_mask, logits_slice=batch.targets).float()
    logits = masked_logits(logits / temperature, mask_id)
    return torch.log_softmax(logits, dim=-1).gather(1, batch.target_ids[:, None]).squeeze(1)


@dataclass
class TraceLossTerms:
    """Sums over a micro-batch's target tokens: `loss` (with grad) = policy-gradient + kl_beta * KL; the others
    detached, for logging."""

    loss: torch.Tensor
    policy_gradient: torch.Tensor
    kl: torch.Tensor
    clipped: torch.Tensor  # tokens whose ratio the clip held
    tokens: int


def trace_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, clip_epsilon: float,
               kl_beta: float) -> TraceLossTerms:
    """TraceRL's per-token objective, summed: -min(ratio·A, clip(ratio, 1 ± ε)·A) + β·k3, with ratio =
    exp(logp_new - logp_old) (the log-ratio clamped to ±10 against overflow) and k3 = exp(-Δ) - 1 + Δ, the estimate
    of KL(policy || rollout policy). The caller divides by the step's normaliser."""
    delta = logp_new - logp_old
    ratio = torch.exp(delta.clamp(-10, 10))
    clipped_ratio = ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon)
    unclipped, held = ratio * advantages, clipped_ratio * advantages
    policy_gradient = -torch.minimum(unclipped, held)
    kl = torch.exp(-delta) - 1 + delta
    return TraceLossTerms(
        loss=(policy_gradient + kl_beta * kl).sum(),
        policy_gradient=policy_gradient.detach().sum(),
        kl=kl.detach().sum(),
        clipped=(held < unclipped).sum(),
        tokens=int(delta.numel()),
    )
