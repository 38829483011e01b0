"""How many rows × positions of KV cache the engine may allocate: estimates of the cache and of the decoding
workspace against the device memory it may use, checked before anything is allocated.

The engine (model/engine.py) sizes every static cache through plan_cache; CacheBudget is its knob and
CacheMemoryError what it raises, saying what to lower, when a batch does not fit.
"""

import math
from dataclasses import dataclass

import torch

from .config import DiceConfig
from .network import KVCache

GIB = 1 << 30


@dataclass
class CacheBudget:
    """How much device memory the engine may take for its KV cache and decoding workspace."""

    reserve_fraction: float = 0.1  # of the device's total memory left untouched (fragmentation, other processes)
    limit_bytes: int | None = None  # cap on cache + workspace on any device (to share a GPU); None: free memory
    cpu_slots: int = 8  # ContinuousBatcher slots on a CPU without limit_bytes, where nothing measures free memory
    max_slots: int = 256  # most slots an automatically sized ContinuousBatcher takes
    prefill_tokens: int = 8192  # prompt tokens prefilled in one forward: joining rows are grouped up to this


@dataclass
class CachePlan:
    """Slots × positions of a static cache, and the memory estimate it was chosen from."""

    slots: int
    capacity: int  # cache positions per slot, the two scratch blocks included
    cache_bytes: int
    workspace_bytes: int  # activations, attention scores, CUDA-graph pools, logits and sampling (an estimate)
    available_bytes: int | None  # what the engine may use; None: not measured (CPU without limit_bytes)


class CacheMemoryError(ValueError):
    """The requested rows × positions do not fit in the memory the engine may use (raised before allocating)."""


def plan_cache(config: DiceConfig, dtype, capacity: int, available: int | None, budget: CacheBudget,
               slots: int | None = None, length_bucket: int | None = None, where: str = "GPU") -> CachePlan:
    """Slots for a cache of `capacity` positions each: as many as fit in `available` bytes (at most
    budget.max_slots) when `slots` is None, else a check that `slots` fit. Raises CacheMemoryError, saying what to
    lower, before anything is allocated. `available` None (a CPU without a limit): budget.cpu_slots, unchecked."""
    fixed, per_slot = decoding_memory(config, dtype, capacity, budget.prefill_tokens, length_bucket)
    if available is None:
        slots = slots or budget.cpu_slots
    else:
        fitting = max(0, (available - fixed) // per_slot)
        slots = slots or min(fitting, budget.max_slots)
        if not 1 <= slots <= fitting:
            slots = max(slots, 1)
            raise CacheMemoryError(_memory_advice(config, dtype, capacity, available, budget, slots, fitting,
                                                  length_bucket, where, needed=fixed + slots * per_slot))
    cache = slots * capacity * KVCache.bytes_per_slot(config, dtype)
    return CachePlan(slots, capacity, cache, fixed + slots * per_slot - cache, available)


def decoding_memory(config: DiceConfig, dtype, capacity: int, prefill_tokens: int,
                    length_bucket: int | None) -> tuple[int, int]:
    """(fixed bytes, bytes per slot) of decoding with `capacity` cache positions per slot, conservatively.

    Fixed: one prefill forward of max(prefill_tokens, capacity) tokens (activations of one layer, and attention
    scores materialised as SDPA's math path does: a boolean mask with grouped KV heads may rule out fused kernels).
    Per slot: its KV cache; per pass shape, the activations, fp32 attention scores and logits one CUDA graph
    keeps in its private pool (one graph per attended-length bucket; one eager pass without graphs); and the fp32
    copies sampling makes of its logits (softmax, filtering, the top-p sort).
    """
    element = torch.empty((), dtype=dtype).element_size()
    heads, size = config.num_attention_heads, config.block_size
    activations = element * (3 * config.hidden_size + 3 * config.intermediate_size
                             + (2 * heads + 2 * config.num_key_value_heads) * config.head_dim)

    def attention_scores(queries: int, keys: int) -> int:
        return heads * queries * keys * (3 * 4 + element)  # fp32 scores, their masked copy, softmax; probs

    prefill = max(prefill_tokens, capacity)
    fixed = prefill * activations + attention_scores(prefill, capacity)
    lengths = range(length_bucket, capacity + length_bucket, length_bucket) if length_bucket else [capacity]
    logits = size * config.vocab_size
    per_pass = sum(2 * size * activations + attention_scores(2 * size, min(length, capacity)) + logits * element
                   for length in lengths)
    per_slot = capacity * KVCache.bytes_per_slot(config, dtype) + per_pass + logits * 8 * 4
    return fixed, per_slot


def _memory_advice(config, dtype, capacity, available, budget, slots, fitting, length_bucket, where,
                   needed: int) -> str:
    """The CacheMemoryError message: what was asked (`needed` bytes), what is available, and the largest batch or
    length that fits."""
    size = config.block_size

    def fits(positions: int) -> bool:  # positions per row, scratch excluded
        fixed_c, per_slot_c = decoding_memory(config, dtype, cache_capacity(positions, size), budget.prefill_tokens,
                                              length_bucket)
        return fixed_c + slots * per_slot_c <= available

    low, high = 0, (capacity - 2 * size) // size  # bisect over whole blocks
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle * size) else (low, middle - 1)
    return (
        f"{slots} rows of {capacity - 2 * size} positions need {needed / GIB:.2f} GiB of {where} "
        f"memory (KV cache {slots * capacity * KVCache.bytes_per_slot(config, dtype) / GIB:.2f} GiB plus decoding "
        f"workspace), but only {available / GIB:.2f} GiB is available to the engine (free memory less a "
        f"{budget.reserve_fraction:.0%} reserve, capped by CacheBudget.limit_bytes). At this length at most "
        f"{fitting} rows fit; with {slots} rows at most {low * size} positions (prompt + max_new_tokens) fit. "
        f"Lower the number of rows (generate(): prompts × n; ContinuousBatcher: slots, or leave slots=None to size "
        f"it from free memory), or the length (max_new_tokens, the prompt, ContinuousBatcher's max_length), or free "
        f"{where} memory."
    )


def available_memory(device: torch.device, budget: CacheBudget) -> int | None:
    """Bytes the engine may allocate now: the driver's free memory plus PyTorch's cached but unused blocks (a
    previous call's cache, still reserved by the allocator), minus the reserve, capped by limit_bytes.
    None on a CPU without a limit: host memory is not measured."""
    measured = None
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        reusable = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        measured = max(0, free + reusable - int(budget.reserve_fraction * total))
    if budget.limit_bytes is None:
        return measured
    return budget.limit_bytes if measured is None else min(measured, budget.limit_bytes)


def cache_capacity(max_length: int, block_size: int) -> int:
    """Cache positions per slot for rows of up to `max_length` positions: whole blocks, plus two blocks of scratch
    slots past the end where free slots (and the missing "previous block" of a row whose generation starts at
    position 0) compute, outside every real query's view."""
    return math.ceil(max_length / block_size) * block_size + 2 * block_size


def positions_needed(prompt_tokens: int, max_new_tokens: int, block_size: int) -> int:
    """Cache positions a request decodes into: whole blocks from 0 up to the end of its last generation block."""
    start = prompt_tokens // block_size * block_size
    return start + math.ceil((prompt_tokens - start + max_new_tokens) / block_size) * block_size
