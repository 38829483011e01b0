"""The decoding choices a caller makes (strategy, confidence threshold, sampling) and their defaults, defined once.

Torch-free, so that command-line parsers and editor settings check them without importing torch. The rules these
choices select are written out in docs/decoding.md#commit-rule and docs/decoding.md#sampling-and-confidence;
the engine that applies them is model/engine.py. Every caller (`generate`, the evals, the language server) picks
each setting the same way, `choose_decoding`: what the user gave, else the checkpoint's default, else the built-in.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

# Which masked positions of the current block a denoising pass commits: "dynamic", SDAR's even schedule plus every
# position whose confidence exceeds the threshold; "static", the schedule alone; "sequential", the schedule's count
# of positions taken left to right.
STRATEGIES = ("dynamic", "static", "sequential")
DEFAULT_STRATEGY = "dynamic"
DEFAULT_THRESHOLD = 0.9  # dynamic: the confidence above which a masked token is committed at once (DICE's setting)
DEFAULT_MAX_NEW_TOKENS = 1024
# The temperature several candidates are sampled at, so that they differ (one candidate is decoded greedily),
# where neither the caller nor the checkpoint's generation_config.json says otherwise.
DEFAULT_SAMPLING_TEMPERATURE = 0.7


@dataclass
class DecodingPolicy:
    """How every row of one batch decodes (one generate() call, or every request of one ContinuousBatcher)."""

    strategy: str = DEFAULT_STRATEGY  # one of STRATEGIES
    threshold: float = DEFAULT_THRESHOLD  # dynamic: also commit every masked token whose confidence exceeds it
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # sample among the k likeliest tokens; 0: off
    top_p: float = 1.0  # sample from the smallest set of tokens holding this probability mass; 1: off
    steps_per_block: int | None = None  # steps the commit schedule spreads a block's masks over; None: block_size
    seed: int | None = None  # seeds the sampling generator, for reproducible candidates

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown decoding strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")


class DecodingChoice(NamedTuple):
    """A decoding setting's value and where it came from: "setting" (a flag or an editor setting), "checkpoint" (its
    generation_config.json: model/checkpoint.py read_decoding_defaults) or "default" (the caller's built-in)."""

    value: Any
    source: str


def choose_decoding(given: dict, checkpoint_defaults: dict, built_in: dict) -> dict[str, DecodingChoice]:
    """For each key of `built_in`: the value in `given` when there is one (None: not given), else the checkpoint's
    decoding default under that key, else the built-in. The three dicts share their names, generation_config.json's
    (`num_return_sequences`, `max_new_tokens`, ...) unless the caller renames the checkpoint's; a key no checkpoint
    carries falls from `given` to `built_in`."""
    chosen = {}
    for key, fallback in built_in.items():
        if given.get(key) is not None:
            chosen[key] = DecodingChoice(given[key], "setting")
        elif key in checkpoint_defaults:
            chosen[key] = DecodingChoice(checkpoint_defaults[key], "checkpoint")
        else:
            chosen[key] = DecodingChoice(fallback, "default")
    return chosen
