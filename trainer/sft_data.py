"""SFT data: JSONL records -> token samples (padded to whole blocks) -> packed rows in a deterministic stream.

Pad-to-block rule (DICE's, docs/decoding.md#block-diffusion-sft): every sample (prompt + response) is right-padded with
the pad token (`<|endoftext|>`) to a multiple of the block size and the pads are *trained* like answer tokens, so the
model learns to fill the rest of the last block with `<|endoftext|>` after `<|im_end|>`. Blocks are counted from each
sample's first token (position ids restart at 0 per sample), which is how the engine aligns them: to absolute positions
of the prompt + generation.

The row stream: epoch e shuffles the samples (seed + e), packs them best-fit into rows of `seq_len` tokens and
shuffles the rows; the stream is epoch 0's rows, then epoch 1's, ... Optimizer step s takes stream rows
[s*G, (s+1)*G) for a global batch of G rows, so the data position of a run is just its step count.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .jsonl import json_objects

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
# A trained assistant turn ends like Qwen's chat template writes it (LLaMA-Factory's qwen3 template labels the
# newline too); the engine stops at <|im_end|>.
RESPONSE_END = IM_END + "\n"
# The fields of an infill task record (CuKe's infill_tasks.jsonl): the reference module and the file split around
# the missing code.
INFILL_KEYS = ("pytorch_code", "prefix", "middle", "suffix")


class SFTDataError(ValueError):
    """Bad SFT data (unreadable file, unknown record shape, nothing left after filtering)."""


@dataclass(frozen=True)
class SFTSample:
    """One training example: `token_ids` = prompt + response + pads (length a multiple of the block size)."""

    token_ids: tuple[int, ...]
    # The first `prompt_length` tokens are context: never masked, never in the loss.
    prompt_length: int

    @property
    def answer_tokens(self) -> int:
        return len(self.token_ids) - self.prompt_length


@dataclass
class SFTDataStats:
    """What loading kept and dropped, for the run log."""

    records: int
    kept: int
    dropped_too_long: int
    tokens: int
    answer_tokens: int


def render_record(record: dict, where: str) -> tuple[str, str]:
    """(prompt text, response text) of a JSONL record; the response includes its end-of-turn marker."""
    if "prompt" in record and ("response" in record or "completion" in record):
        prompt = record["prompt"]
        response = record.get("response", record.get("completion"))
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise SFTDataError(f"{where}: 'prompt' and 'response' must be strings")
        return prompt, response if response.endswith(IM_END) else response + RESPONSE_END
    if "messages" in record:
        return _render_messages(record["messages"], where)
    if all(key in record for key in INFILL_KEYS):
        return _render_infill_task(record, where)
    if "text" in record:
        if not isinstance(record["text"], str):
            raise SFTDataError(f"{where}: 'text' must be a string")
        return "", record["text"] + ENDOFTEXT
    raise SFTDataError(
        f"{where}: a record needs 'prompt' + 'response', 'messages', 'text' or an infill task's "
        f"{', '.join(repr(k) for k in INFILL_KEYS)}; it has keys {sorted(record)}"
    )


def _render_infill_task(record: dict, where: str) -> tuple[str, str]:
    """An infill task (CuKe's infill_tasks.jsonl) as the pair the editor's infill asks for: DICE's infilling prompt
    (reference, prefix, suffix) -> the whole file in a code block, which `splice_infill` cuts the middle out of."""
    from dice_copilot.model.prompts import answer_block, infill_prompt

    if not all(isinstance(record[key], str) for key in INFILL_KEYS):
        raise SFTDataError(f"{where}: an infill task's {', '.join(repr(k) for k in INFILL_KEYS)} must be strings")
    whole = record["prefix"] + record["middle"] + record["suffix"]
    return infill_prompt(record["pytorch_code"], record["prefix"], record["suffix"]), answer_block(whole) + RESPONSE_END


def _render_messages(messages, where: str) -> tuple[str, str]:
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"{where}: 'messages' must be a non-empty list of {{role, content}}")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str) or "role" not in message:
            raise SFTDataError(f"{where}: every message needs a 'role' and a string 'content'")
    if messages[-1]["role"] != "assistant":
        raise SFTDataError(f"{where}: the last message must be the assistant's (it is the trained response)")
    context = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages[:-1])
    return context + f"{IM_START}assistant\n", messages[-1]["content"] + RESPONSE_END


def tokenize_sample(prompt: str, response: str, tokenizer, block_size: int, pad_token_id: int) -> SFTSample:
    """Encode prompt and response separately (as the engine sees the prompt alone) and pad to whole blocks."""
    return tokenize_samples([(prompt, response)], tokenizer, block_size, pad_token_id)[0]


def tokenize_samples(pairs: Sequence[tuple[str, str]], tokenizer, block_size: int,
                     pad_token_id: int) -> list[SFTSample]:
    """`tokenize_sample` of many (prompt, response) pairs in two batch calls (the tokenizer's threads share them)."""
    prompts = tokenizer.encode_batch([prompt for prompt, _ in pairs])
    responses = tokenizer.encode_batch([response for _, response in pairs])
    samples = []
    for (prompt, _), prompt_ids, response_ids in zip(pairs, prompts, responses):
        prompt_ids = prompt_ids if prompt else []
        ids = prompt_ids + response_ids
        ids += [pad_token_id] * (-len(ids) % block_size)
        samples.append(SFTSample(tuple(ids), len(prompt_ids)))
    return samples


def check_train_files(files: Sequence[str | Path]) -> None:
    """Fail before any model is built when the data files are not there."""
    if not files:
        raise SFTDataError("no training data: set train_files to one or more JSONL files")
    for path in map(Path, files):
        if not path.is_file():
            raise SFTDataError(f"training file {path} does not exist")


# Records tokenized per batch call: enough to keep the tokenizer's threads busy, few enough to bound the memory.
_TOKENIZE_BATCH = 1024


def load_sft_samples(
    files: Sequence[str | Path], tokenizer, block_size: int, pad_token_id: int, seq_len: int
) -> tuple[list[SFTSample], SFTDataStats]:
    """Read and tokenize every JSONL file; samples longer than `seq_len` are dropped (DICE: truncate_mode drop)."""
    check_train_files(files)
    samples: list[SFTSample] = []
    records = dropped = 0

    def keep(pairs):
        nonlocal dropped
        for sample in tokenize_samples(pairs, tokenizer, block_size, pad_token_id):
            if len(sample.token_ids) > seq_len or sample.answer_tokens == 0:
                dropped += 1
            else:
                samples.append(sample)

    pending: list[tuple[str, str]] = []
    for path in map(Path, files):
        for where, record in json_objects(path, SFTDataError):
            records += 1
            pending.append(render_record(record, where))
            if len(pending) == _TOKENIZE_BATCH:
                keep(pending)
                pending = []
    keep(pending)
    if not samples:
        raise SFTDataError(
            f"no usable samples in {[str(f) for f in files]}: {records} records, {dropped} longer than "
            f"seq_len={seq_len} tokens or without a response; raise seq_len or check the data"
        )
    stats = SFTDataStats(
        records=records,
        kept=len(samples),
        dropped_too_long=dropped,
        tokens=sum(len(s.token_ids) for s in samples),
        answer_tokens=sum(s.answer_tokens for s in samples),
    )
    return samples, stats


def pack_rows(lengths: Sequence[int], order: Iterable[int], seq_len: int, packing: bool) -> list[list[int]]:
    """Group sample indices into rows of at most `seq_len` tokens: best fit (the fullest row that still has room)
    in the given order; one sample per row without packing."""
    if not packing:
        return [[i] for i in order]
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row index), sorted
    for i in order:
        n = lengths[i]
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            room, row = free.pop(at)
            rows[row].append(i)
            room -= n
        else:
            rows.append([i])
            row, room = len(rows) - 1, seq_len - n
        if room > 0:
            bisect.insort(free, (room, row))
    return rows


@dataclass
class CleanBatch:
    """Packed rows of clean tokens, all [R, L]. `segment_ids` numbers the samples of a row (the filler after the
    last sample is a segment of its own with no answer tokens); positions restart at 0 in every segment."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    answer_mask: torch.Tensor
    # Index of each row in the run's row stream: seeds that row's noise.
    stream_rows: list[int]
    # Per row, the lengths of its samples (filler excluded): for useful-FLOP counts.
    sample_lengths: list[list[int]]

    @property
    def real_tokens(self) -> int:
        """Sample tokens in the batch (filler excluded): for throughput."""
        return sum(map(sum, self.sample_lengths))

    @property
    def answer_tokens(self) -> int:
        return int(self.answer_mask.sum())

    def to(self, device) -> "CleanBatch":
        return CleanBatch(
            self.input_ids.to(device), self.position_ids.to(device), self.segment_ids.to(device),
            self.answer_mask.to(device), self.stream_rows, self.sample_lengths,
        )


def collate_rows(
    samples: Sequence[SFTSample], rows: Sequence[Sequence[int]], stream_rows: list[int], seq_len: int,
    pad_token_id: int,
) -> CleanBatch:
    """Lay out packed rows as tensors, filling each row's tail with untrained pad tokens."""
    shape = (len(rows), seq_len)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment_ids = torch.zeros(shape, dtype=torch.long)
    answer_mask = torch.zeros(shape, dtype=torch.bool)
    sample_lengths = []
    for r, row in enumerate(rows):
        start, lengths = 0, []
        for segment, index in enumerate(row):
            sample = samples[index]
            n = len(sample.token_ids)
            input_ids[r, start : start + n] = torch.tensor(sample.token_ids)
            position_ids[r, start : start + n] = torch.arange(n)
            segment_ids[r, start : start + n] = segment
            answer_mask[r, start + sample.prompt_length : start + n] = True
            lengths.append(n)
            start += n
        if start < seq_len:
            position_ids[r, start:] = torch.arange(seq_len - start)
            segment_ids[r, start:] = len(row)
        sample_lengths.append(lengths)
    return CleanBatch(input_ids, position_ids, segment_ids, answer_mask, list(stream_rows), sample_lengths)


class RowStream:
    """The run's deterministic stream of packed rows (see the module docstring); epochs are packed lazily."""

    def __init__(self, samples: Sequence[SFTSample], seq_len: int, packing: bool, seed: int):
        self.samples = samples
        self.seq_len = seq_len
        self.packing = packing
        self.seed = seed
        self._lengths = [len(s.token_ids) for s in samples]
        self._epochs: list[list[list[int]]] = []
        self._epoch_starts: list[int] = []

    def epoch_rows(self, epoch: int) -> list[list[int]]:
        while len(self._epochs) <= epoch:
            e = len(self._epochs)
            rng = random.Random(self.seed * 1_000_003 + e)
            order = list(range(len(self.samples)))
            rng.shuffle(order)
            rows = pack_rows(self._lengths, order, self.seq_len, self.packing)
            rng.shuffle(rows)
            self._epoch_starts.append(self._epoch_starts[-1] + len(self._epochs[-1]) if self._epochs else 0)
            self._epochs.append(rows)
        return self._epochs[epoch]

    def locate(self, stream_row: int) -> tuple[int, int]:
        """(epoch, row within the epoch) of a stream index."""
        epoch = 0
        while True:
            rows = self.epoch_rows(epoch)
            if stream_row < self._epoch_starts[epoch] + len(rows):
                return epoch, stream_row - self._epoch_starts[epoch]
            epoch += 1

    def rows(self, stream_rows: Sequence[int]) -> list[list[int]]:
        out = []
        for index in stream_rows:
            epoch, row = self.locate(index)
            out.append(self.epoch_rows(epoch)[row])
        return out

    def epoch_of(self, stream_row: int) -> float:
        """Fractional epoch reached at a stream index (for logs)."""
        epoch, row = self.locate(stream_row)
        return epoch + row / len(self.epoch_rows(epoch))

    def answer_tokens(self, stream_rows: Sequence[int]) -> int:
        """Trained tokens in these rows: the loss normaliser of an optimizer step, known before any forward."""
        return sum(self.samples[i].answer_tokens for row in self.rows(stream_rows) for i in row)

    def batch(self, stream_rows: Sequence[int], pad_token_id: int) -> CleanBatch:
        return collate_rows(self.samples, self.rows(stream_rows), list(stream_rows), self.seq_len, pad_token_id)
