"""Server settings (section `diceCopilot`): one dataclass tree, merged from client JSON with per-key validation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dice_copilot.model.decoding import DEFAULT_STRATEGY, DEFAULT_THRESHOLD, STRATEGIES

SECTION = "diceCopilot"
POLICIES = ("ide", "strict")


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
    maxCandidates: int = 4  # candidates decoded together per infill / generation
    strategy: str = DEFAULT_STRATEGY  # decoding strategy, one of STRATEGIES
    threshold: float = DEFAULT_THRESHOLD  # confidence threshold of the dynamic strategy
    maxNewTokens: int = 512  # tokens per infill candidate; whole-kernel generation gets 4x
    referenceModule: str | None = None  # the PyTorch reference for infill; None: same file, then a sibling
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    nvcc: NvccSettings = field(default_factory=NvccSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)


def _check(name: str, value: Any, default: Any) -> Any:
    """`value` converted to the type of `default`, or ValueError naming the key and what is expected."""
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
        try:
            changes[item.name] = _check(name, update[item.name], current if current is not None else "")
        except ValueError as error:
            errors.append(str(error))
    return dataclasses.replace(base, **changes), errors
