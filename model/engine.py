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


class ForwardRunner:
    """Runs the model's denoising pass, replaying a CUDA graph per (batch, attended length) when on a GPU.

    The host is launch-bound: an eager forward of a 1.7B model costs ~50× its memory floor, so the pass must be
    one graph launch. Every pass has the same query shape (2 blocks per row), and the attended cache length is
    rounded up to a multiple of `length_bucket`, so a handful of graphs cover a whole generation.
    """

    def __init__(self, model: DiceForBlockDiffusion, use_graphs: bool, compile: bool = False,
                 length_bucket: int = 256):
        self.model = model
        self.use_graphs = use_graphs
        self.length_bucket = length_bucket
        self._graphs: dict[tuple, tuple] = {}
        # A graph of the eager model still replays ~30 small kernels per layer (norms, rotary, SwiGLU), each with
        # its own launch gap; Inductor fuses them. dynamic=True: one compilation serves every batch and length.
        self._forward = torch.compile(model, dynamic=True) if compile else model

    def attended_length(self, needed: int, capacity: int) -> int:
        if not self.use_graphs:
            return needed
        return min(capacity, -(-needed // self.length_bucket) * self.length_bucket)

    @torch.inference_mode()
    def __call__(self, input_ids, positions, cache: KVCache, logits_slice: slice) -> torch.Tensor:
        mask = block_causal_mask(positions, torch.arange(cache.length, device=positions.device),
                                 self.model.config.block_size)
        if not self.use_graphs:
            return self._forward(input_ids, positions, attn_mask=mask, kv_cache=cache, logits_slice=logits_slice)
        key = (id(cache), input_ids.shape, cache.length)
        if key not in self._graphs:
            self._graphs[key] = self._capture(input_ids, positions, mask, cache, logits_slice)
        graph, static_ids, static_pos, static_mask, static_logits = self._graphs[key]
        static_ids.copy_(input_ids)
        static_pos.copy_(positions)
        static_mask.copy_(mask)
        graph.replay()
        return static_logits

    def _capture(self, input_ids, positions, mask, cache, logits_slice):
        static_ids, static_pos, static_mask = input_ids.clone(), positions.clone(), mask.clone()
        # Warm up on a side stream (allocator and kernel selection), then capture the same call.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(static_ids, static_pos, attn_mask=static_mask, kv_cache=cache, logits_slice=logits_slice)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = self._forward(static_ids, static_pos, attn_mask=static_mask, kv_cache=cache,
                                          logits_slice=logits_slice)
        return graph, static_ids, static_pos, static_mask, static_logits

    def release(self, cache: KVCache):
        """Drops the graphs bound to a cache (they hold its buffers' addresses)."""
        self._graphs = {k: v for k, v in self._graphs.items() if k[0] != id(cache)}


FINISH_REASONS = ("length", "stop", "cancelled")


class BlockDiffusionEngine:
    def __init__(self, model: DiceForBlockDiffusion, tokenizer, device=None, use_cuda_graphs: bool | None = None,
                 compile: bool | None = None):
        """use_cuda_graphs / compile default to on for CUDA devices (compiling costs ~a minute at load)."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if next(model.parameters()).device != self.device:
            self.model.to(self.device)
        self.model.fuse_projections()  # after the move: moving a model undoes the fusion
        if use_cuda_graphs is None:
            use_cuda_graphs = self.device.type == "cuda"
        if compile is None:
            compile = use_cuda_graphs
        self.runner = ForwardRunner(self.model, use_cuda_graphs, compile=compile)

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
        dev = self.device
        size = self.config.block_size
        steps = steps_per_block or size
        mask_id = self.config.mask_token_id
        stop_list = list(self.tokenizer.stop_token_ids if stop is None else stop)
        stop_ids = torch.tensor(stop_list, dtype=torch.long, device=dev)
        generator = torch.Generator(device=dev).manual_seed(seed) if seed is not None else None

        rows = [self._encode(p) for p in prompts for _ in range(n)]
        if not rows:
            return []
        batch = len(rows)
        lengths = [len(r) for r in rows]
        starts = [(lp // size) * size for lp in lengths]  # first generation block; holds the prompt tail
        max_len = max(s + math.ceil((lp - s + max_new_tokens) / size) * size for s, lp in zip(starts, lengths))
        if max_len > self.config.max_position_embeddings:
            raise ValueError(
                f"prompt ({max(lengths)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"{self.config.max_position_embeddings} positions; shorten the prompt or lower max_new_tokens"
            )
        # Two blocks of scratch slots past the end: finished rows (and the missing "previous block" of a row
        # whose generation starts at position 0) compute there, outside every real query's view.
        capacity = max_len + 2 * size
        tokens = torch.full((batch, capacity), mask_id, dtype=torch.long, device=dev)
        for b, r in enumerate(rows):
            tokens[b, : len(r)] = torch.tensor(r, dtype=torch.long, device=dev)
        step_of = torch.full((batch, capacity), -1, dtype=torch.long, device=dev)
        cache = KVCache(self.config, batch, capacity, dev, next(self.model.parameters()).dtype)

        prefill = max(starts)
        if prefill:
            # Rows with a shorter prompt write junk past their own prefill; those slots are rewritten by their
            # own blocks before any query can see them.
            positions = torch.arange(prefill, device=dev)[None].expand(batch, -1)
            cache.length = prefill
            self.model(tokens[:, :prefill], positions, kv_cache=cache, logits_slice=slice(0, 0))

        # Per-row decoding state, all on the device: one host sync per pass (is everyone done?).
        prompt_len = torch.tensor(lengths, device=dev)
        start = torch.tensor(starts, device=dev)
        done = torch.zeros(batch, dtype=torch.bool, device=dev)
        finish = torch.zeros(batch, dtype=torch.long, device=dev)  # index into FINISH_REASONS
        out_end = start.clone()
        passes = torch.zeros(batch, dtype=torch.long, device=dev)
        step_in_block = torch.zeros(batch, dtype=torch.long, device=dev)
        offsets = torch.arange(-size, size, device=dev)
        scratch = torch.arange(max_len, capacity, device=dev)
        block_masked = (tokens.gather(1, start[:, None] + offsets[size:]) == mask_id).sum(1)
        length_limit = prompt_len + max_new_tokens
        needed = max(starts) + size

        while True:
            if cancel is not None and cancel.is_set():
                finish = torch.where(done, finish, FINISH_REASONS.index("cancelled"))
                break
            positions = torch.where(done[:, None], scratch, start[:, None] + offsets)
            positions[:, :size] = torch.where((start == 0)[:, None], scratch[:size], positions[:, :size])
            cache.length = self.runner.attended_length(needed, capacity)
            logits = self.runner(tokens.gather(1, positions), positions, cache, slice(size, 2 * size))
            logits = logits.float()
            logits[..., mask_id] = float("-inf")  # committing the mask token would leave the position masked
            block_pos = positions[:, size:]
            current = tokens.gather(1, block_pos)
            is_masked = current == mask_id
            candidates, confidence = sample_tokens(logits.reshape(-1, logits.shape[-1]), temperature, top_k, top_p,
                                                   generator)
            candidates = candidates.view(batch, size)
            confidence = confidence.view(batch, size).masked_fill(~is_masked, float("-inf"))
            active = ~done
            commit = self._choose(strategy, confidence, is_masked, self._quota(block_masked, step_in_block, steps,
                                                                                is_masked), threshold)
            commit &= active[:, None]
            tokens.scatter_(1, block_pos, torch.where(commit, candidates, current))
            step_of.scatter_(1, block_pos, torch.where(commit, passes[:, None], step_of.gather(1, block_pos)))
            passes += active
            step_in_block += active
            complete = active & ~(is_masked & ~commit).any(1)

            # Stop tokens are checked when a block is committed; the stop token itself is kept in token_ids.
            block_tokens = tokens.gather(1, block_pos)
            is_stop = torch.isin(block_tokens, stop_ids) & (block_pos >= prompt_len[:, None])
            has_stop = complete & is_stop.any(1)
            first_stop = block_pos.gather(1, is_stop.float().argmax(1, keepdim=True)).squeeze(1)
            at_limit = complete & ~has_stop & (start + size >= length_limit)
            out_end = torch.where(has_stop, first_stop + 1, torch.where(at_limit, length_limit,
                                                                       torch.where(complete, start + size, out_end)))
            finish = torch.where(has_stop, FINISH_REASONS.index("stop"), finish)
            done |= has_stop | at_limit
            advance = complete & ~done
            if on_block is not None:
                self._stream(on_block, complete, tokens, prompt_len, out_end, stop_list)
            start = torch.where(advance, start + size, start)
            step_in_block = torch.where(advance, 0, step_in_block)
            block_masked = torch.where(advance, size, block_masked)
            all_done, needed = torch.stack([done.all().long(), (start + size).masked_fill(done, 0).max()]).tolist()
            if all_done:
                break

        self.runner.release(cache)
        wall = time.perf_counter() - started
        results = []
        out_end, passes, finish = out_end.tolist(), passes.tolist(), finish.tolist()
        for b in range(batch):
            ids = tokens[b, lengths[b]:out_end[b]].tolist()
            stats = GenerationStats(
                forward_passes=passes[b],
                tokens_per_forward=len(ids) / passes[b] if passes[b] else 0.0,
                wall_time_s=wall,
                prompt_tokens=lengths[b],
                generated_tokens=len(ids),
            )
            step_map = step_of[b, lengths[b]:out_end[b]].tolist()
            results.append(Generation(ids, self._decode(ids, stop_list), step_map, stats, FINISH_REASONS[finish[b]]))
        return results

    def _encode(self, prompt) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("empty prompt: give at least one token")
        return ids

    def _decode(self, ids: list[int], stop_ids) -> str:
        kept = []
        for t in ids:
            if t in stop_ids:
                break
            kept.append(t)
        return self.tokenizer.decode(kept)

    def _stream(self, on_block, complete, tokens, prompt_len, out_end, stop_list):
        for b in complete.nonzero().flatten().tolist():
            ids = tokens[b, int(prompt_len[b]):int(out_end[b])].tolist()
            on_block(BlockUpdate(index=b, token_ids=ids, text=self._decode(ids, stop_list)))

    @staticmethod
    def _quota(block_masked, step_in_block, steps, is_masked) -> torch.Tensor:
        """Tokens to commit this step per row: SDAR's even split of the block's masks over the steps."""
        n_steps = block_masked.clamp(max=steps).clamp(min=1)
        quota = block_masked // n_steps + (step_in_block < block_masked % n_steps).long()
        # Past the last scheduled step (never reached by static), commit whatever is left.
        return torch.where(step_in_block >= n_steps, is_masked.sum(1), quota)

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
