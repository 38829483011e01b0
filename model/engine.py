"""BlockDiffusionEngine: block-wise parallel decoding of a DICE/SDAR model over a static KV cache.

The decoding rules (blocks, denoising passes, the commit strategies, stops) are written out in
docs/decoding.md#decoding. This file reads top-down: the engine; the ContinuousBatcher that every generate() call
drives; the batcher's device state (SlotBuffers); the ForwardRunner that runs one denoising pass (on a GPU, replays
it as a CUDA graph); then the pass's own arithmetic: sampling, the row bookkeeping and the commit rule. How many
rows × positions fit in memory is memory_plan's question; the caller's decoding choices and their defaults are in
decoding.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._dynamo.exc
import torch._inductor.config

from .decoding import DEFAULT_MAX_NEW_TOKENS, DEFAULT_STRATEGY, DEFAULT_THRESHOLD, DecodingPolicy
from .masks import block_causal_mask
from .memory_plan import (CacheBudget, CacheMemoryError, CachePlan, available_memory, cache_capacity, plan_cache,
                          positions_needed)
from .network import DiceForBlockDiffusion, KVCache, uses_pdl

# The engine's API: what it takes and returns, and what it raises when a batch does not fit.
__all__ = ["BlockDiffusionEngine", "ContinuousBatcher", "DecodingPolicy", "Generation", "GenerationStats",
           "BlockUpdate", "CacheBudget", "CacheMemoryError"]

log = logging.getLogger(__name__)
FINISH_REASONS = ("length", "stop", "cancelled")
# Positions (prompt + generation) one ContinuousBatcher slot holds unless told otherwise: a long DICE prompt plus
# the 4,096 answer tokens DICE was trained and evaluated with.
DEFAULT_MAX_LENGTH = 8192


class BlockDiffusionEngine:
    """Decodes many prompts × n candidates at once with a block-diffusion model (the rules:
    docs/decoding.md#decoding). One generate() call:

    1. prompt: every (prompt, candidate) row takes a slot of one static KV cache (a ContinuousBatcher with a slot
       per row); the prompt's whole blocks are prefilled once, block-causally. Blocks are aligned to absolute
       positions, so the prompt's tail shares the first generation block (and stays fixed there).
    2. blocks: the rest of that block and every later one start fully masked; a row decodes one block at a time.
    3. denoising passes: each pass feeds every row's [previous block ‖ current block] and predicts a token and its
       confidence (softmax probability) at each masked position of the current block. The previous block is clean,
       so the keys/values the pass writes for it are final; every pass has one shape, and on a GPU it is one CUDA
       graph replay (ForwardRunner.run_pass) whose outcome the host reads while the next pass runs.
    4. commit rule: a pass commits SDAR's even share of the block's masks over steps_per_block passes, the most
       confident first (`static`, `dynamic`) or left to right (`sequential`); `dynamic`, the default, also commits
       every masked token whose confidence exceeds `threshold`. Committed tokens are never re-masked.
    5. stop: once its block holds no mask, a row ends if the block holds a stop token (kept in token_ids) or if it
       reached max_new_tokens; otherwise it moves on to the next block. Results come back prompt-major.
    """

    def __init__(self, model: DiceForBlockDiffusion, tokenizer, device=None, use_cuda_graphs: bool | None = None,
                 compile: bool | None = None, cache_budget: CacheBudget | None = None, compile_mode: str | None = None):
        """use_cuda_graphs / compile default to on for CUDA devices (compiling costs ~a minute at load).
        compile_mode: torch.compile's mode for the forward (benchmarks compare them; the runner captures its own
        graphs, so not a "reduce-overhead" one)."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if next(model.parameters()).device != self.device:
            self.model.to(self.device)
        self.model.fuse_projections()  # after the move: moving a model undoes the fusion
        self.dtype = next(self.model.parameters()).dtype
        self.cache_budget = cache_budget or CacheBudget()
        if use_cuda_graphs is None:
            use_cuda_graphs = self.device.type == "cuda"
        if compile is None:
            compile = use_cuda_graphs
        self.runner = ForwardRunner(self.model, use_cuda_graphs, compile=compile, compile_mode=compile_mode)
        self._kept: SlotBuffers | None = None  # the last batcher's buffers, for the next one of that shape

    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        n: int = 1,
        strategy: str = DEFAULT_STRATEGY,
        threshold: float = DEFAULT_THRESHOLD,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        stop: Sequence[int] | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        steps_per_block: int | None = None,
        seed: int | None = None,
        on_block: Callable[[BlockUpdate], None] | None = None,
        cancel=None,
    ) -> list[Generation]:
        """Decode n candidates for every prompt, all together; results are prompt-major (prompt i, candidate j at
        i*n+j). stop None: the tokenizer's stop ids; on_block: called with each committed block of each row;
        cancel (a threading.Event) set: every row ends after its committed blocks. Raises CacheMemoryError
        (saying what to lower) when the batch cannot fit in GPU memory."""
        policy = DecodingPolicy(strategy, threshold, temperature, top_k, top_p, steps_per_block, seed)
        if n < 1 or max_new_tokens < 1:
            raise ValueError("n and max_new_tokens must be at least 1")
        rows = [self._encode(p) for p in prompts for _ in range(n)]
        if not rows:
            return []
        max_len = max(positions_needed(len(r), max_new_tokens, self.config.block_size) for r in rows)
        if max_len > self.config.max_position_embeddings:
            raise ValueError(
                f"prompt ({max(len(r) for r in rows)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                f"model's {self.config.max_position_embeddings} positions; shorten the prompt or lower max_new_tokens"
            )
        results: list[Generation | None] = [None] * len(rows)
        max_len = self._graph_friendly_length(len(rows), max_len)
        with ContinuousBatcher(self, slots=len(rows), max_length=max_len, policy=policy) as batcher:
            for row in rows:
                batcher.submit(row, max_new_tokens, stop, on_block)
            for request_id, generation in batcher.run(cancel):
                results[request_id] = generation
        return results

    def _graph_friendly_length(self, slots: int, length: int) -> int:
        """`length` rounded up to the CUDA graphs' length bucket when that fits in memory, so calls with nearby
        lengths (an editor's requests) get the same cache shape and replay the kept cache's graphs instead of
        capturing new ones. Unchanged without graphs."""
        if not self.runner.use_graphs:
            return length
        bucket = self.runner.length_bucket
        rounded = min(self.config.max_position_embeddings, math.ceil(length / bucket) * bucket)
        capacity = cache_capacity(rounded, self.config.block_size)
        kept = self._kept
        if rounded == length or (kept is not None and kept.slots == slots and kept.cache.max_length == capacity):
            return rounded
        try:
            self.cache_plan(capacity, slots)
        except CacheMemoryError:
            return length
        return rounded

    def _encode(self, prompt) -> list[int]:
        """A prompt's token ids: text is encoded, ids are taken as they are."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("empty prompt: give at least one token")
        return ids

    def _decode(self, ids: list[int], stop_ids) -> str:
        """The text of `ids` up to the first stop id."""
        kept = []
        for t in ids:
            if t in stop_ids:
                break
            kept.append(t)
        return self.tokenizer.decode(kept)

    def take_slots(self, capacity: int, slots: int | None) -> SlotBuffers:
        """Buffers of `slots` rows × `capacity` positions (slots None: as many as fit). The last batcher's are
        reused when they have that shape, so the CUDA graphs captured on them replay at once: repeated generate()
        calls of one shape (an editor's requests, RL rounds) capture nothing after the first. Their stale
        keys/values are never visible (see ContinuousBatcher)."""
        kept, self._kept = self._kept, None
        if kept is not None and slots == kept.slots and capacity == kept.cache.max_length:
            return kept
        if kept is not None:
            self.runner.release(kept.cache)  # before sizing: its memory counts as free again
            del kept
        plan = self.cache_plan(capacity, slots)
        cache = KVCache(self.config, plan.slots, capacity, self.device, self.dtype)
        return SlotBuffers(cache, self.config.block_size, self.config.mask_token_id)

    def cache_plan(self, capacity: int, slots: int | None = None) -> CachePlan:
        """Slots × `capacity` positions sized from the memory this engine may use now (see plan_cache)."""
        bucket = self.runner.length_bucket if self.runner.use_graphs else None
        return plan_cache(self.config, self.dtype, capacity, available_memory(self.device, self.cache_budget),
                          self.cache_budget, slots, bucket, where=self.device.type.upper())

    def keep_slots(self, buffers: SlotBuffers) -> None:
        """Keep one set of buffers (the latest) with its graphs for reuse; an older kept one is released."""
        if self._kept is not None and self._kept is not buffers:
            self.runner.release(self._kept.cache)
        self._kept = buffers

    def release_cache(self) -> None:
        """Frees the kept buffers and the graphs captured on them; the next call allocates and captures anew (an RL
        trainer hands that memory to its optimizer steps between rollouts)."""
        if self._kept is not None:
            self.runner.release(self._kept.cache)
            self._kept = None


@dataclass
class Generation:
    """One sequence's result."""

    token_ids: list[int]  # generated ids, up to and including the stop token when one ended the sequence
    text: str  # decoded without the stop token, mask and padding
    step_map: list[int]  # step_map[i]: the denoising pass (0-based, per sequence) at which token_ids[i] was committed
    stats: GenerationStats
    finish_reason: str  # "stop", "length" or "cancelled"


@dataclass
class GenerationStats:
    forward_passes: int  # denoising passes this sequence took part in (prefill not counted)
    tokens_per_forward: float  # generated tokens / forward_passes
    wall_time_s: float  # from submission (the generate() call) until this sequence finished
    prompt_tokens: int
    generated_tokens: int


@dataclass
class BlockUpdate:
    """Streaming event, sent after each committed block of one sequence."""

    index: int  # the sequence's request id: its position in generate()'s result list / what submit() returned
    token_ids: list[int] = field(default_factory=list)
    text: str = ""


class ContinuousBatcher:
    """Decodes a stream of requests through a fixed number of row slots of one static KV cache; sequences join
    and leave between blocks (docs/decoding.md#continuous-batching).

    - submit(prompt, max_new_tokens, stop, on_block) queues a request and returns its id (0, 1, ... per batcher);
    - step() frees the slots of cancelled requests, prefills waiting requests into free slots (batched), runs one
      denoising pass over every slot and returns the (id, Generation) pairs that finished in it;
    - run() steps until nothing is waiting or running, yielding each result as soon as it is done. submit() may be
      called between yields (or from another thread, as may cancel()); step()/run() belong to one thread.

    Per request: prompt, max_new_tokens, stop ids, streaming callback. Per batcher: the DecodingPolicy (strategy,
    threshold, sampling) and max_length (prompt + generation positions per slot). Free slots compute in scratch
    positions, so every pass has the same shape and the CUDA graphs keyed on it are captured once.
    Greedy results equal generate() of each request alone: a row's mask is block-causal over its own absolute
    positions, and every slot it can see was written by its own prefill or passes, never by a previous occupant
    (see _admit).
    """

    def __init__(self, engine: BlockDiffusionEngine, slots: int | None = None, max_length: int | None = None,
                 policy: DecodingPolicy | None = None, pipelined: bool | None = None):
        """slots None: as many as fit in free GPU memory (engine.cache_budget; on a CPU, its cpu_slots).
        pipelined (default: on a GPU): the host acts on a pass's outcome while the next pass runs, so the GPU
        never waits for the host between passes; results are the same, each known one pass later."""
        config = engine.config
        limit = config.max_position_embeddings
        max_length = max_length or min(DEFAULT_MAX_LENGTH, limit)
        if not 1 <= max_length <= limit:
            raise ValueError(f"max_length {max_length} must be between 1 and the model's {limit} positions")
        self.engine = engine
        self.policy = policy or DecodingPolicy()
        size = config.block_size
        self.max_length = math.ceil(max_length / size) * size
        capacity = cache_capacity(max_length, size)
        self.buffers = engine.take_slots(capacity, slots)
        self.buffers.reset()
        self.slots = self.buffers.slots
        self._steps = self.policy.steps_per_block or size
        self._generator = self.buffers.seeded_generator(self.policy.seed)
        self._ids = itertools.count()
        self._waiting: deque[_Request] = deque()
        self._running: dict[int, _Request] = {}  # slot -> request
        self._cancels: deque[int | None] = deque()
        self._needed = 0  # cache positions the running rows attend to (host copy, refreshed each pass)
        self._lag = int(engine.device.type == "cuda" if pipelined is None else pipelined)
        self._in_flight: deque[_LaunchedPass] = deque()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Hands the buffers (and the CUDA graphs captured on them) back to the engine for the next batcher."""
        self.engine.keep_slots(self.buffers)

    @property
    def unfinished(self) -> int:
        """Requests waiting or decoding."""
        return len(self._waiting) + len(self._running)

    def submit(self, prompt: str | Sequence[int], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
               stop: Sequence[int] | None = None, on_block: Callable[[BlockUpdate], None] | None = None) -> int:
        """Queues a request; returns its id. stop None: the tokenizer's stop ids."""
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        ids = self.engine._encode(prompt)
        needed = positions_needed(len(ids), max_new_tokens, self.engine.config.block_size)
        if needed > self.max_length:
            raise ValueError(
                f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) needs {needed} positions but this "
                f"batcher's slots hold {self.max_length}; shorten the prompt, lower max_new_tokens, or create the "
                f"ContinuousBatcher with a larger max_length"
            )
        stop_ids = list(self.engine.tokenizer.stop_token_ids if stop is None else stop)
        request = _Request(next(self._ids), ids, max_new_tokens, stop_ids, on_block, time.perf_counter())
        self._waiting.append(request)
        return request.id

    def cancel(self, request_id: int | None = None) -> None:
        """Ends one request (None: every request) at the next step; a running one keeps its committed blocks.
        Unknown or finished ids are ignored."""
        self._cancels.append(request_id)

    @torch.inference_mode()
    def step(self) -> list[tuple[int, Generation]]:
        """Cancels, admits waiting requests into free slots, runs one denoising pass; returns what finished."""
        finished = self._apply_cancels()
        self._admit()
        if self._running:
            finished += self._denoise()
        return finished

    def run(self, cancel=None) -> Iterator[tuple[int, Generation]]:
        """Steps until nothing is waiting or running. `cancel` (a threading.Event) set: every request ends."""
        while self.unfinished or self._cancels:
            if cancel is not None and cancel.is_set():
                self.cancel()
            yield from self.step()

    def _apply_cancels(self) -> list[tuple[int, Generation]]:
        finished, slots = [], set()
        while self._cancels:
            target = self._cancels.popleft()
            for request in [r for r in list(self._waiting) if target in (None, r.id)]:  # list(): submit() may append
                self._waiting.remove(request)
                finished.append((request.id, self._result(request, [], [], 0, "cancelled")))
            slots |= {slot for slot, r in self._running.items() if target in (None, r.id)}
        if slots:
            rows = torch.tensor(sorted(slots), device=self.engine.device)
            self.buffers.done[rows] = True
            self.buffers.finish[rows] = FINISH_REASONS.index("cancelled")
            finished += self._harvest(sorted(slots))
        return finished

    def _admit(self) -> None:
        """Moves waiting requests into free slots: resets the slot's row state and prefills the prompt's whole blocks.

        A new occupant never sees its predecessor's keys: the prefill rewrites slots [0, start), and a row at block
        position s attends (block-causally, over absolute positions) to slots below s + block_size only, of which
        [s - block_size, s + block_size) are rewritten by the pass itself and the rest by its own earlier passes.
        """
        free = [slot for slot in range(self.slots) if slot not in self._running]
        joining = []
        while free and self._waiting:
            request = self._waiting.popleft()
            self._running[free[0]] = request
            joining.append((free.pop(0), request))
        if not joining:
            return
        dev, b = self.engine.device, self.buffers
        size, mask_id = self.engine.config.block_size, b.mask_id
        rows = torch.tensor([slot for slot, _ in joining], device=dev)
        width = max(len(r.prompt_ids) for _, r in joining)
        prompts = torch.full((len(joining), width), mask_id, dtype=torch.long)
        b.widen_stops(max(len(r.stop) for _, r in joining))
        stops = torch.full((len(joining), b.stop_ids.shape[1]), -1, dtype=torch.long)
        for i, (_, request) in enumerate(joining):
            prompts[i, : len(request.prompt_ids)] = torch.tensor(request.prompt_ids)
            stops[i, : len(request.stop)] = torch.tensor(request.stop, dtype=torch.long)
        starts = [len(r.prompt_ids) // size * size for _, r in joining]
        lengths = torch.tensor([[len(r.prompt_ids), s, len(r.prompt_ids) + r.max_new_tokens]
                                for (_, r), s in zip(joining, starts)], device=dev)

        b.tokens[rows] = mask_id
        b.tokens[rows, :width] = prompts.to(dev)
        b.prompt_len[rows], b.start[rows], b.length_limit[rows] = lengths.unbind(1)
        b.out_end[rows] = lengths[:, 1]
        for counter in (b.passes, b.step_in_block, b.finish):
            counter[rows] = 0
        first_block = b.tokens[rows].gather(1, lengths[:, 1:2] + b.offsets[size:])
        b.block_masked[rows] = (first_block == mask_id).sum(1)
        b.stop_ids[rows] = stops.to(dev)
        b.done[rows] = False
        self._prefill([(slot, s) for (slot, _), s in zip(joining, starts) if s > 0])
        self._needed = max(self._needed, max(starts) + size)

    def _prefill(self, rows: list[tuple[int, int]]) -> None:
        """Prefills (slot, whole-block prompt length) rows, grouped up to cache_budget.prefill_tokens per forward.
        A row shorter than its group's longest writes junk past its own prompt blocks; its own passes rewrite those
        slots before any of its queries can see them."""
        budget = self.engine.cache_budget.prefill_tokens
        group: list[tuple[int, int]] = []
        for slot, length in rows:
            if group and (len(group) + 1) * max([length] + [n for _, n in group]) > budget:
                self._prefill_group(group)
                group = []
            group.append((slot, length))
        if group:
            self._prefill_group(group)

    def _prefill_group(self, group: list[tuple[int, int]]) -> None:
        length = max(n for _, n in group)
        slots = torch.tensor([slot for slot, _ in group], device=self.engine.device)
        positions = torch.arange(length, device=self.engine.device)[None].expand(len(group), -1)
        self.engine.model(self.buffers.tokens[slots, :length], positions,
                          kv_cache=_PrefillWriter(self.buffers.cache, slots, length), logits_slice=slice(0, 0))

    def _denoise(self) -> list[tuple[int, Generation]]:
        """Launches one denoising pass over every slot (one graph replay on a GPU), then settles the oldest pass
        in flight (this one without lag): streams its completed blocks, returns the requests that finished."""
        b, runner, policy = self.buffers, self.engine.runner, self.policy
        # Each pass in flight may advance a row by one block beyond what the host knows.
        needed = self._needed + len(self._in_flight) * self.engine.config.block_size
        b.cache.length = runner.attended_length(needed, b.cache.max_length)
        # Everything the captured pass bakes in as constants is in the key, down to which generator it samples with.
        key = (b.cache.length, b.stop_ids.shape[1], policy.strategy, policy.threshold, policy.temperature,
               policy.top_k, policy.top_p, self._steps, self._generator is not None)
        out = runner.run_pass(b.cache, key, self._pass, b.pass_state(), self._generator)
        self._in_flight.append(_LaunchedPass.of(out, dict(self._running)))
        if len(self._in_flight) <= self._lag:
            return []
        finished = self._settle(self._in_flight.popleft())
        if not self._running:
            self._in_flight.clear()  # passes over free slots only: nothing to learn from them
        return finished

    def _pass(self) -> torch.Tensor:
        """The denoising pass on the device: forward, sampling, commits, stop and length checks, block advance.
        Writes the row state in place (it is replayed as a CUDA graph over the same buffers) and returns
        [done per slot ‖ block completed per slot ‖ committed length per slot ‖ cache positions the running rows
        need]."""
        b, policy, runner = self.buffers, self.policy, self.engine.runner
        size = self.engine.config.block_size
        positions = torch.where(b.done[:, None], b.scratch, b.start[:, None] + b.offsets)
        positions[:, :size] = torch.where((b.start == 0)[:, None], b.scratch[:size], positions[:, :size])
        logits = runner.forward(b.tokens.gather(1, positions), positions, b.cache, slice(size, 2 * size))
        rules = (self._steps, policy.strategy, policy.threshold)
        if policy.temperature > 0:
            # The random draw takes a generator, which a compiled function cannot: sampled eagerly, the
            # bookkeeping after it compiled.
            candidates, confidence = sample_tokens(masked_logits(logits, b.mask_id), policy.temperature,
                                                   policy.top_k, policy.top_p, self._generator)
            return runner.advance_rows(b, positions, candidates, confidence, *rules)
        return runner.advance_rows_greedy(b, positions, logits, *rules)

    def _settle(self, launched: _LaunchedPass) -> list[tuple[int, Generation]]:
        """Acts on a finished pass's outcome for the requests that occupied their slots when it was launched (a
        slot freed and refilled since then belongs to a request the pass did not decode)."""
        flags = launched.values()
        done, complete, out_end = (flags[i * self.slots: (i + 1) * self.slots] for i in range(3))
        same = [slot for slot, r in self._running.items() if launched.occupants.get(slot) is r]
        # Rows admitted after the launch are missing from the pass's count: never shrink below theirs.
        exact = len(same) == len(self._running) == len(launched.occupants)
        self._needed = flags[-1] if exact else max(self._needed, flags[-1])
        streaming = [slot for slot in same if complete[slot] and self._running[slot].on_block is not None]
        if streaming:
            self._stream(streaming, out_end)
        ended = [slot for slot in same if done[slot]]
        return self._harvest(ended) if ended else []

    def _stream(self, slots: list[int], out_end: list[int]) -> None:
        """Streams each slot's committed text up to the end its settled pass reported (committed tokens never
        change, so reading them after later passes is safe)."""
        rows = torch.tensor(slots, device=self.engine.device)
        ends = [out_end[slot] for slot in slots]
        for slot, end, row in zip(slots, ends, self.buffers.tokens[rows, : max(ends)].tolist()):
            request = self._running[slot]
            ids = row[len(request.prompt_ids): end]
            request.on_block(BlockUpdate(request.id, ids, self.engine._decode(ids, request.stop)))

    def _harvest(self, slots: list[int]) -> list[tuple[int, Generation]]:
        """Results of finished rows; their slots become free (they stay `done`, computing in scratch)."""
        rows = torch.tensor(slots, device=self.engine.device)
        b = self.buffers
        ends, passes, finish = torch.stack([b.out_end[rows], b.passes[rows], b.finish[rows]]).tolist()
        rows_out = torch.stack([b.tokens[rows, : max(ends)], b.step_of[rows, : max(ends)]], 1).tolist()
        results = []
        for slot, end, n_passes, reason, (ids, steps) in zip(slots, ends, passes, finish, rows_out):
            request = self._running.pop(slot)
            begin = len(request.prompt_ids)
            results.append((request.id, self._result(request, ids[begin:end], steps[begin:end], n_passes,
                                                     FINISH_REASONS[reason])))
        return results

    def _result(self, request: _Request, ids: list[int], step_map: list[int], passes: int,
                reason: str) -> Generation:
        stats = GenerationStats(
            forward_passes=passes,
            tokens_per_forward=len(ids) / passes if passes else 0.0,
            wall_time_s=time.perf_counter() - request.submitted,
            prompt_tokens=len(request.prompt_ids),
            generated_tokens=len(ids),
        )
        return Generation(ids, self.engine._decode(ids, request.stop), step_map, stats, reason)


@dataclass
class _Request:
    """A submitted request, as the batcher holds it while it waits or decodes."""

    id: int
    prompt_ids: list[int]
    max_new_tokens: int
    stop: list[int]
    on_block: Callable[[BlockUpdate], None] | None
    submitted: float  # perf_counter() at submit()


@dataclass
class _LaunchedPass:
    """A denoising pass's outcome on its way to the host, and the requests in the slots when it was launched."""

    host: torch.Tensor  # filled once `copied` has passed on the GPU
    copied: torch.cuda.Event | None
    occupants: dict[int, _Request]

    @classmethod
    def of(cls, out: torch.Tensor, occupants: dict[int, _Request]) -> _LaunchedPass:
        if out.device.type != "cuda":
            return cls(out.clone(), None, occupants)
        # A copy of its own: the pass's output tensor is the graph's, overwritten by the next replay.
        host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        host.copy_(out, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        return cls(host, copied, occupants)

    def values(self) -> list[int]:
        if self.copied is not None:
            self.copied.synchronize()
        return self.host.tolist()


class SlotBuffers:
    """A ContinuousBatcher's device buffers: the static KV cache and each row slot's decoding state.

    The denoising pass's CUDA graphs read and write these tensors by address, so they are allocated together,
    updated only in place, and reused together (the engine keeps the last ones for the next batcher of the same
    shape, graphs included).
    """

    def __init__(self, cache: KVCache, block_size: int, mask_id: int):
        self.cache, self.mask_id = cache, mask_id
        self.slots, capacity, dev = cache.k[0].shape[0], cache.max_length, cache.k[0].device

        def counter():
            return torch.zeros(self.slots, dtype=torch.long, device=dev)

        self.tokens = torch.full((self.slots, capacity), mask_id, dtype=torch.long, device=dev)
        self.step_of = torch.full((self.slots, capacity), -1, dtype=torch.long, device=dev)
        self.prompt_len, self.start, self.length_limit, self.out_end = counter(), counter(), counter(), counter()
        self.passes, self.step_in_block, self.block_masked = counter(), counter(), counter()
        self.finish = counter()  # an index into FINISH_REASONS
        self.done = torch.ones(self.slots, dtype=torch.bool, device=dev)  # free slots count as done
        # Stop ids per row, padded with -1. Only ever widened (each width is its own graph key), never narrowed,
        # so that one width always names one tensor.
        self.stop_ids = torch.full((self.slots, 0), -1, dtype=torch.long, device=dev)
        self.offsets = torch.arange(-block_size, block_size, device=dev)  # [previous block ‖ current block]
        self.scratch = torch.arange(capacity - 2 * block_size, capacity, device=dev)  # the two scratch blocks
        self._generator: torch.Generator | None = None

    @torch.inference_mode()  # stop_ids may be an inference tensor (widened during a step)
    def reset(self) -> None:
        """Every slot free, as if new."""
        self.tokens.fill_(self.mask_id)
        self.step_of.fill_(-1)
        for counter in (self.prompt_len, self.start, self.length_limit, self.out_end, self.passes,
                        self.step_in_block, self.block_masked, self.finish):
            counter.zero_()
        self.done.fill_(True)
        self.stop_ids.fill_(-1)

    def seeded_generator(self, seed: int | None) -> torch.Generator | None:
        """The sampling generator, seeded; None (the default generator) without a seed. One object per buffers,
        since a graph that samples with it is bound to it."""
        if seed is None:
            return None
        if self._generator is None:
            self._generator = torch.Generator(device=self.cache.k[0].device)
        return self._generator.manual_seed(seed)

    def widen_stops(self, width: int) -> None:
        """Room for `width` stop ids per row."""
        if width > self.stop_ids.shape[1]:
            pad = self.stop_ids.new_full((self.slots, width - self.stop_ids.shape[1]), -1)
            self.stop_ids = torch.cat([self.stop_ids, pad], 1)

    def pass_state(self) -> list[torch.Tensor]:
        """The tensors a denoising pass writes."""
        return [self.tokens, self.step_of, self.out_end, self.finish, self.done, self.start, self.step_in_block,
                self.block_masked, self.passes]


class _PrefillWriter:
    """The KV-cache interface the network calls (`length`, `update`) for a prefill of some rows of a shared cache.

    Writes the prompt's keys/values into those rows in place, so the cache (and the CUDA graphs bound to its
    buffers) stays the same object, and attends to the fresh keys: a prefill at positions 0..length-1 attends to
    exactly the slots it writes.
    """

    def __init__(self, cache: KVCache, rows: torch.Tensor, length: int):
        self.cache, self.length = cache, length
        self._rows = rows[:, None]

    def update(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int):
        self.cache.write(layer, self._rows, positions, k, v)
        return k, v


class ForwardRunner:
    """Runs the model's denoising pass, replaying a CUDA graph per shape when on a GPU.

    The host is launch-bound: an eager forward of a 1.7B model costs ~50× its memory floor, and the sampling and
    commit bookkeeping after it are ~40 more small kernels (about half a forward's time at batch 1), so a whole
    denoising pass (forward, sampling, commits, row state) is one graph launch (`run_pass`). Every pass has the same
    query shape (2 blocks per row), and the attended cache length is rounded up to a multiple of `length_bucket`, so
    a handful of graphs cover a whole generation.
    """

    def __init__(self, model: DiceForBlockDiffusion, use_graphs: bool, compile: bool = False,
                 length_bucket: int = 256, compile_mode: str | None = None):
        self.model = model
        self.use_graphs = use_graphs
        self.length_bucket = length_bucket
        self._graphs: dict[tuple, tuple] = {}  # keys start with id(cache): the buffers a graph is bound to
        self._pass_graphs = True  # off after a capture failed
        # A graph of the eager model still replays ~30 small kernels per layer (norms, rotary, SwiGLU), each with
        # its own launch gap; Inductor fuses them. dynamic=True: one compilation serves every batch and length.
        # Inductor's kernels launch with PDL where ours do, so that a launch gap hides behind the kernel before
        # (not with an explicit compile_mode: torch.compile takes a mode or options, not both; not on a torch
        # whose Inductor lacks the option).
        pdl = (not compile_mode and hasattr(torch._inductor.config.triton, "enable_pdl")
               and uses_pdl(next(model.parameters()).device))
        self._compile_options = {"triton.enable_pdl": True} if pdl else None
        self._forward = (torch.compile(model, dynamic=True, mode=compile_mode, options=self._compile_options)
                         if compile else model)
        self.compile_bookkeeping(compile)

    def compile_bookkeeping(self, on: bool) -> None:
        """The pass's bookkeeping after the forward (sampling, commits, row state) compiled by Inductor, or eager.
        Eager it is dozens of small kernels, each with its launch gap even in a graph; fused, a batch-1 pass on an
        H200 took 0.1 ms less. Graphs captured before a switch keep the functions they were captured with."""
        options = self._compile_options
        self.advance_rows = torch.compile(advance_rows, dynamic=True, options=options) if on else advance_rows
        self.advance_rows_greedy = (torch.compile(advance_rows_greedy, dynamic=True, options=options) if on
                                    else advance_rows_greedy)

    def run_pass(self, cache: KVCache, key: tuple, step: Callable[[], torch.Tensor], state: Sequence[torch.Tensor],
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Runs `step()`: one whole denoising pass that updates `state` (tensors) in place and returns a tensor.

        On a GPU it is captured once per (cache, key) and replayed after: the graph reads and writes the very
        tensors `step` used while captured, so they must stay the same objects (in-place updates only)."""
        if not self.use_graphs or not self._pass_graphs:
            return self._eager_if_compiling_fails(step)
        full_key = (id(cache), "pass", key)
        if full_key not in self._graphs:
            try:
                self._graphs[full_key] = self._eager_if_compiling_fails(
                    lambda: self._capture(step, state, generator))
            except Exception:  # noqa: BLE001 - decoding must go on; the passes then run as separate launches
                log.exception("capturing the denoising pass as one CUDA graph failed; running it uncaptured")
                self._pass_graphs = False
                return step()
        graph, out = self._graphs[full_key]
        graph.replay()
        return out

    def _eager_if_compiling_fails(self, run: Callable[[], Any]) -> Any:
        """run(); if Inductor fails to compile part of the pass (a compiler bug at a shape not seen before), the
        model and bookkeeping go eager for good and run() is tried again: slower, but the request is served. The
        retry is safe: a compilation fails before its code runs, a forward run again writes the same cache entries,
        and a failed capture restores the state."""
        try:
            return run()
        except torch._dynamo.exc.BackendCompilerFailed:
            if self._forward is self.model and self.advance_rows is advance_rows:
                raise
            log.exception("torch.compile failed on the denoising pass; running the model and bookkeeping eager")
            self._forward = self.model
            self.compile_bookkeeping(False)
            return run()

    def _capture(self, step, state, generator=None):
        """(graph, output) of `step`; warm-up runs (allocator, kernel selection) leave `state` and the sampling
        generator as they were, so the first replay is the pass itself (also when the capture fails)."""
        saved = [t.clone() for t in state]
        rng = generator.get_state() if generator is not None else None

        def restore():
            torch.cuda.synchronize()
            for t, s in zip(state, saved):
                t.copy_(s)
            if generator is not None:
                generator.set_state(rng)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(stream):
                for _ in range(2):
                    step()
                    restore()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            if generator is not None:
                graph.register_generator_state(generator)  # a seeded generator advances with every replay
            with torch.cuda.graph(graph):
                out = step()
        except Exception:
            restore()
            raise
        return graph, out

    def forward(self, input_ids, positions, cache: KVCache, logits_slice: slice) -> torch.Tensor:
        """The model over `cache.length` cache slots with the block-causal mask (no graph)."""
        mask = block_causal_mask(positions, torch.arange(cache.length, device=positions.device),
                                 self.model.config.block_size)
        return self._forward(input_ids, positions, attn_mask=mask, kv_cache=cache, logits_slice=logits_slice)

    def attended_length(self, needed: int, capacity: int) -> int:
        """Cache slots a pass attends to: the `needed` ones, rounded up to the length bucket with graphs."""
        if not self.use_graphs:
            return needed
        return min(capacity, -(-needed // self.length_bucket) * self.length_bucket)

    @torch.inference_mode()
    def __call__(self, input_ids, positions, cache: KVCache, logits_slice: slice) -> torch.Tensor:
        """The forward alone, as a graph replay on a GPU (what bench/decode.py times against the memory floor)."""
        if not self.use_graphs:
            return self.forward(input_ids, positions, cache, logits_slice)
        key = (id(cache), "forward", input_ids.shape, cache.length)
        if key not in self._graphs:
            static_ids, static_pos = input_ids.clone(), positions.clone()
            graph, logits = self._capture(lambda: self.forward(static_ids, static_pos, cache, logits_slice), [])
            self._graphs[key] = (graph, static_ids, static_pos, logits)
        graph, static_ids, static_pos, logits = self._graphs[key]
        static_ids.copy_(input_ids)
        static_pos.copy_(positions)
        graph.replay()
        return logits

    def release(self, cache: KVCache):
        """Drops the graphs bound to a cache (they hold its buffers' addresses)."""
        self._graphs = {k: v for k, v in self._graphs.items() if k[0] != id(cache)}


def masked_logits(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Logits [..., V] as float rows [N, V] that cannot choose the mask token (committing it would leave the
    position masked). The RL trainer's log-probabilities exclude it through this function too (rl_trace)."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    return logits.reshape(-1, logits.shape[-1])


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
        # One draw per row by the exponential race (what torch.multinomial does for one sample), spelled out
        # because it has no host sync and so can be captured in a CUDA graph.
        race = torch.empty_like(filtered).exponential_(generator=generator)
        tokens = (torch.softmax(filtered, dim=-1) / race).argmax(dim=-1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1)


def advance_rows_greedy(b: SlotBuffers, positions, logits, steps: int, strategy: str,
                        threshold: float) -> torch.Tensor:
    """advance_rows after choosing each position's most likely token (no random draw: compiles whole)."""
    candidates, confidence = greedy_tokens(masked_logits(logits, b.mask_id))
    return advance_rows(b, positions, candidates, confidence, steps, strategy, threshold)


GREEDY_CHUNKS = 64  # vocabulary slices reduced at once by greedy_tokens


def greedy_tokens(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's most likely token of logits [N, V] and its softmax probability, as sample_tokens at temperature
    0, reduced over GREEDY_CHUNKS slices of the vocabulary first and then across them. One long row per program
    leaves the GPU idle at batch 1: Inductor gave softmax+argmax over 4 rows of 152k tokens one 40 us kernel.
    The probability of the maximum is 1 / sum(exp(l - max)); ties go to the lowest token id, as argmax's do."""
    n, v = logits.shape
    x = torch.nn.functional.pad(logits.float(), (0, -v % GREEDY_CHUNKS), value=float("-inf"))
    x = x.view(n, GREEDY_CHUNKS, -1)
    chunk_max, chunk_arg = x.max(-1)
    best = chunk_max.max(-1, keepdim=True).values
    safe = torch.where(chunk_max == float("-inf"), 0.0, chunk_max)  # an all -inf slice adds nothing
    chunk_sum = torch.exp(x - safe[..., None]).sum(-1)
    total = (chunk_sum * torch.exp(safe - best)).sum(-1)
    which = (chunk_max == best).int().argmax(-1)  # the first slice holding the maximum
    tokens = which * x.shape[-1] + chunk_arg.gather(-1, which[:, None]).squeeze(-1)
    return tokens, 1.0 / total


def advance_rows(b: SlotBuffers, positions, candidates, confidence, steps: int, strategy: str,
                 threshold: float) -> torch.Tensor:
    """The bookkeeping of a denoising pass after sampling: commits, stop and length checks, block advance, in
    place on the slot buffers. Returns [done ‖ block completed ‖ committed length ‖ positions needed]."""
    size, mask_id = positions.shape[1] // 2, b.mask_id
    block_pos = positions[:, size:]
    current = b.tokens.gather(1, block_pos)
    is_masked = current == mask_id
    candidates = candidates.view(b.slots, size)
    confidence = confidence.view(b.slots, size).masked_fill(~is_masked, float("-inf"))
    active = ~b.done
    quota = commit_quota(b.block_masked, b.step_in_block, steps, is_masked)
    commit = choose_commits(strategy, confidence, is_masked, quota, threshold) & active[:, None]
    b.tokens.scatter_(1, block_pos, torch.where(commit, candidates, current))
    b.step_of.scatter_(1, block_pos, torch.where(commit, b.passes[:, None], b.step_of.gather(1, block_pos)))
    b.passes.add_(active)
    b.step_in_block.add_(active)
    complete = active & ~(is_masked & ~commit).any(1)

    # Stop tokens are checked when a block is committed; the stop token itself is kept in token_ids.
    block_tokens = b.tokens.gather(1, block_pos)
    is_stop = ((block_tokens[:, :, None] == b.stop_ids[:, None, :]).any(-1)
               & (block_pos >= b.prompt_len[:, None]))
    has_stop = complete & is_stop.any(1)
    first_stop = block_pos.gather(1, is_stop.float().argmax(1, keepdim=True)).squeeze(1)
    at_limit = complete & ~has_stop & (b.start + size >= b.length_limit)
    b.out_end.copy_(torch.where(has_stop, first_stop + 1, torch.where(
        at_limit, b.length_limit, torch.where(complete, b.start + size, b.out_end))))
    b.finish.masked_fill_(has_stop, FINISH_REASONS.index("stop"))
    b.done.logical_or_(has_stop | at_limit)
    advance = complete & ~b.done
    b.start.add_(advance * size)
    b.step_in_block.masked_fill_(advance, 0)
    b.block_masked.masked_fill_(advance, size)
    needed = (b.start + size).masked_fill(b.done, 0).max()
    return torch.cat([b.done.long(), complete.long(), b.out_end, needed[None]])


def commit_quota(block_masked, step_in_block, steps, is_masked) -> torch.Tensor:
    """Tokens to commit this step per row: SDAR's even split of the block's masks over the steps."""
    n_steps = block_masked.clamp(max=steps).clamp(min=1)
    quota = block_masked // n_steps + (step_in_block < block_masked % n_steps).long()
    # Past the last scheduled step (never reached by static), commit whatever is left.
    return torch.where(step_in_block >= n_steps, is_masked.sum(1), quota)


def descending_rank(values: torch.Tensor) -> torch.Tensor:
    """Each entry's place (0 = first) in its row of values [B, n] sorted in descending order, ties in position
    order: argsort(descending).argsort() as n pointwise comparisons with each column in turn (n is a block, a few
    tokens), which Inductor fuses into the pass's other kernels. The two sorts were ATen kernels of their own, 7 us
    per batch-1 pass on the H200; an [B, n, n] comparison summed over its last axis makes Inductor (torch 2.11)
    fail an assertion in its tiling analysis once the batch is a symbolic size."""
    position = torch.arange(values.shape[1], device=values.device)
    rank = torch.zeros_like(values, dtype=torch.long)
    for column in range(values.shape[1]):
        theirs = values[:, column, None]
        rank = rank + ((theirs > values) | ((theirs == values) & (position > column)))
    return rank


def choose_commits(strategy, confidence, is_masked, quota, threshold, rank_by=descending_rank) -> torch.Tensor:
    """Which masked positions [B, size] to commit this step. rank_by: the confidence ranking (another one only
    for bench/commit_rank.py's baseline)."""
    if strategy == "sequential":
        rank = is_masked.long().cumsum(1) - 1  # masked positions ranked left to right (the others never commit)
    else:
        rank = rank_by(confidence)
    commit = (rank < quota[:, None]) & is_masked
    if strategy == "dynamic":
        commit |= (confidence > threshold) & is_masked
    return commit
