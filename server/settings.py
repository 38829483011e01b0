"""Server settings (section `diceCopilot`): one dataclass tree, merged from client JSON with per-key validation, and
the decoding they select with the checkpoint loaded now (`decoding_for`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dice_copilot.model.decoding import (DEFAULT_SAMPLING_TEMPERATURE, DEFAULT_STRATEGY, DEFAULT_THRESHOLD,
                                        STRATEGIES, choose_decoding)
from dice_copilot.validator.static_checks import POLICIES

SECTION = "diceCopilot"
KERNEL_TOKENS_FACTOR = 4  # a whole ModelNew module is several times longer than an infill
# The decoding where neither a setting nor the checkpoint's generation_config.json says otherwise, by the names of
# `Decoding`. Several candidates are sampled at `temperature` so that they differ; one is decoded greedily.
BUILT_IN_DECODING = {
    "strategy": DEFAULT_STRATEGY, "threshold": DEFAULT_THRESHOLD, "maxCandidates": 4, "maxNewTokens": 512,
    "kernelMaxNewTokens": 512 * KERNEL_TOKENS_FACTOR, "temperature": DEFAULT_SAMPLING_TEMPERATURE, "topK": 0, "topP": 1.0,
    "stepsPerBlock": None,
}
# generation_config.json's decoding keys (model/checkpoint.py: DECODING_DEFAULT_RULES) by the names of `Decoding`.
# Its max_new_tokens budgets a whole answer, so it is the whole-kernel budget; an infill answer re-emits the code
# around the cursor, and maxNewTokens counts only the new code.
CHECKPOINT_KEYS = {
    "strategy": "strategy", "threshold": "threshold", "maxCandidates": "num_return_sequences",
    "kernelMaxNewTokens": "max_new_tokens", "temperature": "temperature", "topK": "top_k", "topP": "top_p",
    "stepsPerBlock": "steps_per_block",
}


@dataclass(frozen=True)
class ValidationSettings:
    policy: str = "ide"  # "ide" (practical) or "strict" (custom kernels must do the heavy work)
    atol: float | None = None  # absolute tolerance; None: the validator's (1e-4 fp32, 1e-2 fp16/bf16)
    rtol: float | None = None  # relative tolerance; None: the validator's
    timing: bool = True  # measure the speedup against PyTorch (GPU only)
    timeoutS: float = 300.0  # hard limit for compiling, and for running, one candidate (seconds)


@dataclass(frozen=True)
class NvccSettings:
    path: str | None = None  # the nvcc to use; None: `nvcc` on PATH
    flags: tuple[str, ...] = ()  # extra nvcc flags
    arch: str | None = None  # target arch (e.g. "sm_90"); None: the local GPU, else the validator's default


@dataclass(frozen=True)
class TelemetrySettings:
    enabled: bool = False  # write a local JSONL log of shown / accepted suggestions
    path: str | None = None  # where; None: ~/.cache/dice-copilot/telemetry.jsonl


@dataclass(frozen=True)
class ServerSettings:
    checkpoint: str | None = None  # checkpoint folder or "default"; None: the embedded default
    device: str = "auto"  # "auto" (cuda when present), "cuda", "cuda:N" or "cpu"
    autoTrigger: bool = True  # answer automatic inline-completion triggers
    autoBudgetMs: int = 1200  # how long an automatic trigger waits for validated items
    invokedBudgetMs: int = 15000  # how long an invoked trigger waits
    # Decoding: None (unset, or null from the client) takes the loaded checkpoint's generation_config.json default
    # (CHECKPOINT_KEYS), else BUILT_IN_DECODING's; a value the user sets wins over both (`decoding_for`; showStatus
    # reports each value and its source).
    maxCandidates: int | None = None  # candidates decoded per infill / generation, so the most suggestions shown
    strategy: str | None = None  # decoding strategy, one of STRATEGIES
    threshold: float | None = None  # confidence threshold of the dynamic strategy
    maxNewTokens: int | None = None  # tokens for the new code of an infill candidate; a whole kernel gets 4x
    referenceModule: str | None = None  # the PyTorch reference for infill; None: same file, then a sibling
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    nvcc: NvccSettings = field(default_factory=NvccSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)


@dataclass(frozen=True)
class Decoding:
    """How the server decodes with the checkpoint loaded now; `sources` says where each value came from: "setting"
    (the user's), "checkpoint" (its generation_config.json) or "default" (BUILT_IN_DECODING)."""

    strategy: str
    threshold: float
    maxCandidates: int  # candidates per request
    maxNewTokens: int  # tokens for the new code of an infill answer (the re-emitted code around it is added)
    kernelMaxNewTokens: int  # tokens of a whole-kernel answer
    temperature: float  # of several candidates (one is greedy)
    topK: int
    topP: float
    stepsPerBlock: int | None  # None: the block size
    sources: dict[str, str]

    def to_wire(self) -> dict:
        """`{name: {value, source}}`, as showStatus reports it."""
        return {name: {"value": getattr(self, name), "source": source} for name, source in self.sources.items()}


def decoding_for(settings: ServerSettings, checkpoint_defaults: dict) -> Decoding:
    """The decoding `settings` select with a checkpoint whose generation_config.json holds `checkpoint_defaults`
    (model/checkpoint.py: read_decoding_defaults): the user's setting, else the checkpoint's, else the built-in,
    as `dice-copilot generate` and the evals pick them (model/decoding.py: choose_decoding)."""
    tokens = settings.maxNewTokens
    given = {"strategy": settings.strategy, "threshold": settings.threshold, "maxCandidates": settings.maxCandidates,
             "maxNewTokens": tokens, "kernelMaxNewTokens": None if tokens is None else tokens * KERNEL_TOKENS_FACTOR}
    carried = {name: checkpoint_defaults[key] for name, key in CHECKPOINT_KEYS.items() if key in checkpoint_defaults}
    chosen = choose_decoding(given, carried, BUILT_IN_DECODING)
    return Decoding(**{name: choice.value for name, choice in chosen.items()},
                    sources={name: choice.source for name, choice in chosen.items()})


def _check(name: str, value: Any, default: Any) -> Any:
    """`value` converted to the type of `default`, or ValueError naming the key and what is expected."""
    if value is None and name in BUILT_IN_DECODING:
        return None  # unset: the checkpoint's default, else the built-in
    expected = type(default)
    if name in ("checkpoint", "referenceModule", "nvcc.path", "nvcc.arch", "telemetry.path"):
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ValueError(f"{SECTION}.{name} must be a string or null, got {value!r}")
        return value
    if name in ("validation.atol", "validation.rtol"):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{SECTION}.{name} must be a non-negative number or null, got {value!r}")
        return float(value)
    if name == "nvcc.flags":
        if isinstance(value, str):
            return tuple(value.split())
        if not isinstance(value, (list, tuple)) or not all(isinstance(flag, str) for flag in value):
            raise ValueError(f"{SECTION}.{name} must be a list of strings, got {value!r}")
        return tuple(value)
    if expected is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{SECTION}.{name} must be true or false, got {value!r}")
        return value
    if expected in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{SECTION}.{name} must be a number, got {value!r}")
        if value < 0 or (name in ("maxCandidates", "maxNewTokens") and value < 1):
            raise ValueError(f"{SECTION}.{name} must be positive, got {value!r}")
        return expected(value)
    if not isinstance(value, str):
        raise ValueError(f"{SECTION}.{name} must be a string, got {value!r}")
    if name == "strategy" and value not in STRATEGIES:
        raise ValueError(f"{SECTION}.strategy must be one of {', '.join(STRATEGIES)}, got {value!r}")
    if name == "validation.policy" and value not in POLICIES:
        raise ValueError(f"{SECTION}.validation.policy must be one of {', '.join(POLICIES)}, got {value!r}")
    if name == "device" and not (value in ("auto", "cpu", "cuda") or value.startswith("cuda:")):
        raise ValueError(f"{SECTION}.device must be auto, cpu, cuda or cuda:N, got {value!r}")
    return value


def merge_settings(base: Any, update: Any, prefix: str = "") -> tuple[Any, list[str]]:
    """`base` with the keys of the client object `update` applied; bad values keep the old value and are returned as
    messages. Accepts the section object itself or `{"diceCopilot": {...}}`."""
    if not isinstance(update, dict):
        return base, ([] if update is None else [f"{SECTION} settings must be an object, got {type(update).__name__}"])
    if not prefix and SECTION in update and isinstance(update[SECTION], dict):
        update = update[SECTION]
    changes: dict[str, Any] = {}
    errors: list[str] = []
    for item in dataclasses.fields(base):
        if item.name not in update:
            continue
        name = prefix + item.name
        current = getattr(base, item.name)
        if dataclasses.is_dataclass(current):
            merged, nested_errors = merge_settings(current, update[item.name], name + ".")
            changes[item.name] = merged
            errors.extend(nested_errors)
            continue
        example = BUILT_IN_DECODING.get(name, current)  # an unset decoding setting has its built-in's type
        try:
            changes[item.name] = _check(name, update[item.name], example if example is not None else "")
        except ValueError as error:
            errors.append(str(error))
    return dataclasses.replace(base, **changes), errors
