"""BlockDiffusionEngine: block-wise parallel decoding of a DICE/SDAR model with a static KV cache.

Algorithm (dice-method.md §2.3 with the corrections of §5):
- blocks are aligned to absolute positions; the prompt tail shares the first generation block and stays fixed;
- the prompt's whole blocks are prefilled once, block-causally;
- every denoising pass feeds [previous block ‖ current block] (2 × block_size query tokens): the previous block
  is clean, so its KV written in that pass is final. This fuses the reference loop's extra "save" pass of block b
  into the first denoising pass of block b+1, and gives every pass the same shape (ready for CUDA graphs);
- committed tokens are never re-masked; confidence comes from the unfiltered softmax;
- stop tokens are checked when a block is committed; all prompts × n candidates decode together, each row with
  its own block position and step count.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .masks import block_causal_mask
from .network import DiceForBlockDiffusion, KVCache

STRATEGIES = ("dynamic", "static", "sequential")


@dataclass
class GenerationStats:
    forward_passes: int  # denoising passes this sequence took part in (prefill not counted)
    tokens_per_forward: float  # generated tokens / forward_passes
    wall_time_s: float  # of the whole batched generate() call
    prompt_tokens: int
    generated_tokens: int


@dataclass
class Generation:
    token_ids: list[int]  # generated ids, up to and including the stop token when one ended the sequence
    text: str  # decoded without the stop token, mask and padding
    step_map: list[int]  # step_map[i]: the denoising pass (0-based, per sequence) at which token_ids[i] was committed
    stats: GenerationStats
    finish_reason: str  # "stop", "length" or "cancelled"


@dataclass
class BlockUpdate:
    """Streaming event, sent after each committed block of one sequence."""

    index: int  # position of the sequence in the generate() result list
    token_ids: list[int] = field(default_factory=list)
    text: str = ""


def sample_tokens(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator=None):
    """Token choice and its confidence for each row of logits [N, V].

    The confidence is the chosen token's probability under the *unfiltered* softmax (at the sampling
    temperature), so top-k/top-p filtering cannot inflate it to 1 and make `dynamic` commit whole blocks.
    """
    logits = logits.float()
    scaled = logits / temperature if temperature > 0 else logits
    probs = torch.softmax(scaled, dim=-1)
    if temperature <= 0:
        tokens = probs.argmax(dim=-1)
    else:
        filtered = scaled
        if top_k > 0:
            kth = torch.topk(filtered, min(top_k, filtered.shape[-1]), dim=-1).values[..., -1:]
            filtered = filtered.masked_fill(filtered < kth, float("-inf"))
        if top_p < 1.0:
            sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)
            cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
            drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # keep the token crossing top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            filtered = filtered.masked_fill(drop, float("-inf"))
        tokens = torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator).squeeze(-1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1)


def commit_schedule(masked: int, steps: int) -> list[int]:
    """Tokens to commit at each step when `masked` tokens are spread over `steps` (SDAR's even split)."""
    steps = max(1, min(steps, masked))
    return [masked // steps + (1 if s < masked % steps else 0) for s in range(steps)]


class BlockDiffusionEngine:
    def __init__(self, model: DiceForBlockDiffusion, tokenizer, device=None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if next(model.parameters()).device != self.device:
            self.model.to(self.device)

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        n: int = 1,
        strategy: str = "dynamic",
        threshold: float = 0.9,
        max_new_tokens: int = 1024,
        stop: Sequence[int] | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        steps_per_block: int | None = None,
        seed: int | None = None,
        on_block: Callable[[BlockUpdate], None] | None = None,
        cancel=None,
    ) -> list[Generation]:
        """Decode n candidates for every prompt; results are prompt-major (prompt i, candidate j at i*n+j)."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown decoding strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if n < 1 or max_new_tokens < 1:
            raise ValueError("n and max_new_tokens must be at least 1")
        started = time.perf_counter()
        size = self.config.block_size
        steps = steps_per_block or size
        mask_id = self.config.mask_token_id
        stop_ids = set(self.tokenizer.stop_token_ids if stop is None else stop)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)

        rows = [self._encode(p) for p in prompts for _ in range(n)]
        if not rows:
            return []
        batch = len(rows)
        prompt_len = [len(r) for r in rows]
        start = [(lp // size) * size for lp in prompt_len]  # first generation block; holds the prompt tail
        end = [s + math.ceil((lp - s + max_new_tokens) / size) * size for s, lp in zip(start, prompt_len)]
        max_len = max(end)
        if max_len > self.config.max_position_embeddings:
            raise ValueError(
                f"prompt ({max(prompt_len)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"{self.config.max_position_embeddings} positions; shorten the prompt or lower max_new_tokens"
            )
        # Two blocks of scratch slots past the end: finished rows (and the missing "previous block" of a row
        # whose generation starts at position 0) compute there, outside every real query's view.
        scratch = torch.arange(max_len, max_len + 2 * size, device=self.device)
        tokens = torch.full((batch, max_len + 2 * size), mask_id, dtype=torch.long, device=self.device)
        for b, r in enumerate(rows):
            tokens[b, : len(r)] = torch.tensor(r, dtype=torch.long, device=self.device)
        step_of = torch.full((batch, max_len + 2 * size), -1, dtype=torch.long, device=self.device)
        cache = KVCache(self.config, batch, max_len + 2 * size, self.device, next(self.model.parameters()).dtype)

        prefill = max(start)
        if prefill:
            # Rows with a shorter prompt write junk past their own prefill; those slots are rewritten by their
            # own blocks before any query can see them.
            positions = torch.arange(prefill, device=self.device)[None].expand(batch, -1)
            cache.length = prefill
            self.model(tokens[:, :prefill], positions, kv_cache=cache, logits_slice=slice(0, 0))

        done = [False] * batch
        finish = ["length"] * batch
        out_end = list(end)
        passes = [0] * batch
        step_in_block = [0] * batch
        schedule = [commit_schedule(int((tokens[b, start[b]:start[b] + size] == mask_id).sum()), steps)
                    for b in range(batch)]
        offsets = torch.arange(-size, size, device=self.device)

        while not all(done):
            if cancel is not None and cancel.is_set():
                for b in range(batch):
                    if not done[b]:
                        done[b], finish[b] = True, "cancelled"
                        out_end[b] = start[b]
                break
            positions = torch.empty((batch, 2 * size), dtype=torch.long, device=self.device)
            for b in range(batch):
                if done[b]:
                    positions[b] = scratch
                else:
                    positions[b] = start[b] + offsets
                    if start[b] == 0:
                        positions[b, :size] = scratch[:size]
            cache.length = max(start[b] + size for b in range(batch) if not done[b])
            mask = block_causal_mask(positions, torch.arange(cache.length, device=self.device), size)
            logits = self.model(tokens.gather(1, positions), positions, attn_mask=mask, kv_cache=cache,
                                logits_slice=slice(size, 2 * size))
            logits[..., mask_id] = float("-inf")  # committing the mask token would leave the position masked
            block_pos = positions[:, size:]
            current = tokens.gather(1, block_pos)
            is_masked = current == mask_id
            candidates, confidence = sample_tokens(logits.reshape(-1, logits.shape[-1]), temperature, top_k, top_p,
                                                   generator)
            candidates = candidates.view(batch, size)
            confidence = confidence.view(batch, size).masked_fill(~is_masked, float("-inf"))
            quota = torch.tensor(
                [0 if done[b] else schedule[b][min(step_in_block[b], len(schedule[b]) - 1)] for b in range(batch)],
                device=self.device,
            )
            active = torch.tensor([not d for d in done], device=self.device)[:, None]
            commit = self._choose(strategy, confidence, is_masked, quota, threshold) & active
            tokens.scatter_(1, block_pos, torch.where(commit, candidates, current))
            pass_index = torch.tensor(passes, device=self.device)[:, None].expand(-1, size)
            step_of.scatter_(1, block_pos, torch.where(commit, pass_index, step_of.gather(1, block_pos)))
            block_complete = ((~is_masked) | commit).all(dim=1).tolist()

            for b in range(batch):
                if done[b]:
                    continue
                passes[b] += 1
                step_in_block[b] += 1
                if not block_complete[b]:
                    continue
                self._finish_block(b, tokens, start, prompt_len, end, stop_ids, done, finish, out_end, max_new_tokens)
                if on_block is not None:
                    ids = tokens[b, prompt_len[b]:min(out_end[b], start[b] + size)].tolist()
                    on_block(BlockUpdate(index=b, token_ids=ids, text=self._decode(ids, stop_ids)))
                if not done[b]:
                    start[b] += size
                    step_in_block[b] = 0
                    schedule[b] = commit_schedule(size, steps)

        wall = time.perf_counter() - started
        results = []
        for b in range(batch):
            ids = tokens[b, prompt_len[b]:out_end[b]].tolist()
            step_map = step_of[b, prompt_len[b]:out_end[b]].tolist()
            stats = GenerationStats(
                forward_passes=passes[b],
                tokens_per_forward=len(ids) / passes[b] if passes[b] else 0.0,
                wall_time_s=wall,
                prompt_tokens=prompt_len[b],
                generated_tokens=len(ids),
            )
            results.append(Generation(ids, self._decode(ids, stop_ids), step_map, stats, finish[b]))
        return results

    def _encode(self, prompt) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("empty prompt: give at least one token")
        return ids

    def _decode(self, ids: list[int], stop_ids: set[int]) -> str:
        kept = []
        for t in ids:
            if t in stop_ids:
                break
            kept.append(t)
        return self.tokenizer.decode(kept)

    @staticmethod
    def _choose(strategy, confidence, is_masked, quota, threshold) -> torch.Tensor:
        """Which masked positions [B, size] to commit this step."""
        size = confidence.shape[1]
        if strategy == "sequential":
            # Rank masked positions left to right.
            order_key = torch.where(is_masked, torch.arange(size, device=confidence.device).float(),
                                    torch.full_like(confidence, float("inf")))
            rank = order_key.argsort(dim=1).argsort(dim=1)
        else:
            rank = confidence.argsort(dim=1, descending=True).argsort(dim=1)
        commit = (rank < quota[:, None]) & is_masked
        if strategy == "dynamic":
            commit |= (confidence > threshold) & is_masked
        return commit

    def _finish_block(self, b, tokens, start, prompt_len, end, stop_ids, done, finish, out_end, max_new_tokens):
        """A block of row b is fully committed: stop at a stop token or at the length limit."""
        size = self.config.block_size
        lo = max(start[b], prompt_len[b])
        block = tokens[b, lo:start[b] + size].tolist()
        for i, t in enumerate(block):
            if t in stop_ids:
                done[b], finish[b] = True, "stop"
                out_end[b] = lo + i + 1
                return
        if start[b] + size - prompt_len[b] >= max_new_tokens:
            done[b], finish[b] = True, "length"
            out_end[b] = prompt_len[b] + max_new_tokens
        else:
            out_end[b] = start[b] + size
