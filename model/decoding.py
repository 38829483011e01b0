"""The decoding choices a caller makes (strategy, confidence threshold, sampling) and their defaults, defined once.

Torch-free, so that command-line parsers and editor settings check them without importing torch. The rules these
choices select are written out in docs/decoding.md#commit-rule and docs/decoding.md#sampling-and-confidence;
the engine that applies them is model/engine.py.
"""

from dataclasses import dataclass

# Which masked positions of the current block a denoising pass commits: "dynamic", SDAR's even schedule plus every
# position whose confidence exceeds the threshold; "static", the schedule alone; "sequential", the schedule's count
# of positions taken left to right.
STRATEGIES = ("dynamic", "static", "sequential")
DEFAULT_STRATEGY = "dynamic"
DEFAULT_THRESHOLD = 0.9  # dynamic: the confidence above which a masked token is committed at once (DICE's setting)
DEFAULT_MAX_NEW_TOKENS = 1024


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
