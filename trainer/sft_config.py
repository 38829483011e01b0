"""SFTConfig: every knob of block-diffusion SFT in one dataclass, overridable from a TOML or YAML file.

Defaults follow DICE's SFT recipe (dice-method.md §1.4): block 4, sequences packed to 6144 tokens, samples that do
not fit dropped, lr 1e-5 constant with 3% warmup, 3 epochs, bf16.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_files import config_from_dict, read_config_values

SCHEDULES = ("constant_with_warmup", "cosine", "linear")
MIXED_PRECISION = ("bf16", "fp16", "no")
ATTENTION_BACKENDS = ("auto", "flex", "dense")
SAVE_DTYPES = ("bfloat16", "float16", "float32")


class SFTConfigError(ValueError):
    """A bad SFT config value or file; the message names the field and what to do."""


@dataclass
class SFTConfig:
    """Block-diffusion SFT settings. Paths are relative to the working directory (or to the config file's folder
    when read with `load_sft_config`)."""

    # --- model -------------------------------------------------------------------------------------------
    # A size preset of `DiceConfig.from_name` ("tiny", "small", "base", "dice-1.7b", "dice-4b", "dice-8b") to train
    # from scratch, or a checkpoint folder: SDAR/DICE (model_type "sdar") or a plain causal Qwen3 (a mask token is
    # added to its tokenizer and, when needed, to its embeddings).
    model: str = "tiny"
    # Tokenizer folder (HF layout, e.g. from `dice-copilot train tokenizer`); required for presets, optional for
    # checkpoints (their own tokenizer is used by default).
    tokenizer: str | None = None
    # DiceConfig field overrides for from-scratch presets, e.g. {num_hidden_layers = 4}.
    model_overrides: dict[str, Any] = field(default_factory=dict)
    # Block size to train at; None keeps the checkpoint's (DICE: 4). Inference must use the same value.
    block_size: int | None = None

    # --- data --------------------------------------------------------------------------------------------
    # JSONL files; each line {"prompt", "response"} (prompt already chat-formatted, e.g. the DICE end-to-end prompt),
    # {"messages": [{"role", "content"}, ...]} (the last assistant turn is trained) or {"text"} (all trained).
    train_files: list[str] = field(default_factory=list)
    # Tokens per packed row of the clean half (the model sees twice this: noisy ‖ clean). Samples longer than this
    # are dropped, as DICE's `truncate_mode: drop` does (a truncated kernel would teach the model to stop mid-code).
    seq_len: int = 6144
    # Pack several samples into one row (block-diagonal attention between them); False = one sample per row.
    packing: bool = True

    # --- diffusion objective (dice-method.md §2.2) ---------------------------------------------------------
    # Masking probability p = (1 - eps) * t + eps with t ~ U(0, 1) drawn once per sample.
    noise_eps: float = 1e-3
    # Redraws of a sample's mask until at least one answer token is masked; after that one answer token is masked
    # at random, so every sample contributes to the loss.
    max_noise_retries: int = 10

    # --- optimisation ------------------------------------------------------------------------------------
    # Passes over the data; fractional values stop part-way through the last epoch.
    epochs: float = 3.0
    # Stop after this many optimizer steps (overrides `epochs` when set).
    max_steps: int | None = None
    # Packed rows per GPU per micro-step.
    per_device_batch_size: int = 1
    # Micro-steps per optimizer step. Global batch = per_device_batch_size * grad_accum * number of processes.
    grad_accum: int = 1
    learning_rate: float = 1e-5
    # "constant_with_warmup" (DICE), "cosine" or "linear" decay after warmup.
    schedule: str = "constant_with_warmup"
    # Warmup as a fraction of all optimizer steps (DICE: 0.03); `warmup_steps` wins when set.
    warmup_ratio: float = 0.03
    warmup_steps: int | None = None
    # Floor of the cosine/linear decay as a fraction of learning_rate.
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    # Global gradient-norm clip; 0 disables clipping.
    max_grad_norm: float = 1.0
    # Seeds weight init, data order and the noise (the noise of a row depends only on seed, epoch and row index,
    # so runs on 1 or N GPUs with the same global batch see identical masks).
    seed: int = 42

    # --- speed -------------------------------------------------------------------------------------------
    # Autocast precision with fp32 master weights; "bf16" falls back to "no" on a CPU-only machine.
    mixed_precision: str = "bf16"
    # The fused AdamW kernel on CUDA; false: the foreach implementation.
    fused_adamw: bool = True
    # FSDP with mixed precision only. accelerate's own policy gathers the sharded fp32 weights in bf16 (so the
    # residual stream, norms and logits run in bf16) and reduces gradients in bf16. By default the weights are
    # gathered in fp32 and autocast casts for the matmuls, and gradients are reduced in fp32: the numerics of one
    # GPU and DDP. Gathering in the mixed dtype halves the all-gather bytes; reducing in it halves the
    # reduce-scatter bytes.
    fsdp_gather_in_mixed_precision: bool = False
    fsdp_reduce_in_mixed_precision: bool = False
    # Recompute each layer's activations in the backward pass (less memory, ~30% more compute).
    gradient_checkpointing: bool = False
    # "flex": flex-attention BlockMask (GPU, compiled); "dense": boolean mask through SDPA; "auto": flex on CUDA
    # when `compile` is on, dense otherwise.
    attention_backend: str = "auto"
    # torch.compile each decoder layer on CUDA (needed for fast flex-attention); ignored on CPU.
    compile: bool = True
    # bf16 dense matmul peak of one device in TFLOP/s for the MFU readout; None = look it up from the device name.
    peak_tflops: float | None = None

    # --- output ------------------------------------------------------------------------------------------
    # Run folder: `checkpoint/` (HF layout the server loads, replaced atomically), `state/step-N/` (exact resume),
    # `tensorboard/`, `loss_curve.png`, `metrics.jsonl`.
    output_dir: str = "runs/sft"
    # Write the HF checkpoint and a resumable state every N optimizer steps (and always at the end); 0 = end only.
    save_every_steps: int = 500
    # Weight dtype of the exported HF checkpoint ("bfloat16" as DICE ships, "float16" or "float32").
    save_dtype: str = "bfloat16"
    # Resumable states kept on disk (older ones are deleted).
    keep_last_states: int = 2
    # Continue from the newest state in output_dir/state when one exists.
    resume: bool = True
    # Log to metrics.jsonl / TensorBoard every N optimizer steps.
    log_every_steps: int = 10
    tensorboard: bool = True
    progress_bar: bool = True

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise SFTConfigError naming the first bad field."""
        checks = [
            ("seq_len", self.seq_len >= 1, "must be >= 1"),
            ("epochs", self.epochs > 0, "must be > 0"),
            ("max_steps", self.max_steps is None or self.max_steps >= 1, "must be >= 1 or unset"),
            ("schedule", self.schedule in SCHEDULES, f"must be one of {SCHEDULES}"),
            ("warmup_ratio", 0 <= self.warmup_ratio < 1, "must be in [0, 1)"),
            ("warmup_steps", self.warmup_steps is None or self.warmup_steps >= 0, "must be >= 0 or unset"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "must be in [0, 1]"),
            ("noise_eps", 0 < self.noise_eps < 1, "must be in (0, 1)"),
            ("max_noise_retries", self.max_noise_retries >= 1, "must be >= 1"),
        ]
        raise_first_bad_field(self, checks + training_run_checks(self), "SFT", SFTConfigError)

    def replace(self, **changes) -> "SFTConfig":
        return dataclasses.replace(self, **changes)


def training_run_checks(config) -> list[tuple[str, bool, str]]:
    """(field, ok, rule) for the fields every training run has, SFT's and RL's alike."""
    return [
        ("per_device_batch_size", config.per_device_batch_size >= 1, "must be >= 1"),
        ("grad_accum", config.grad_accum >= 1, "must be >= 1"),
        ("learning_rate", config.learning_rate > 0, "must be > 0"),
        ("max_grad_norm", config.max_grad_norm >= 0, "must be >= 0"),
        ("mixed_precision", config.mixed_precision in MIXED_PRECISION, f"must be one of {MIXED_PRECISION}"),
        ("attention_backend", config.attention_backend in ATTENTION_BACKENDS, f"must be one of {ATTENTION_BACKENDS}"),
        ("block_size", config.block_size is None or config.block_size >= 1, "must be >= 1 or unset"),
        ("save_dtype", config.save_dtype in SAVE_DTYPES, f"must be one of {SAVE_DTYPES}"),
        ("save_every_steps", config.save_every_steps >= 0, "must be >= 0"),
        ("keep_last_states", config.keep_last_states >= 1, "must be >= 1"),
        ("log_every_steps", config.log_every_steps >= 1, "must be >= 1"),
    ]


def raise_first_bad_field(config, checks: list[tuple[str, bool, str]], what: str, error: type[Exception]) -> None:
    for name, ok, rule in checks:
        if not ok:
            raise error(f"{what} config field {name!r} = {getattr(config, name)!r} {rule}")


def sft_config_from_dict(values: dict[str, Any], source: str = "config") -> SFTConfig:
    """Build an SFTConfig from a mapping, rejecting unknown keys with the list of known ones."""
    return config_from_dict(SFTConfig, values, "SFT", SFTConfigError, source)


def load_sft_config(path: str | Path, **overrides) -> SFTConfig:
    """Read a TOML (.toml) or YAML (.yaml/.yml) file over the defaults; relative paths are taken from the file's
    folder (`model` too when that folder holds it). `overrides` (e.g. from the command line) win over the file."""
    values = read_config_values(path, "SFT", SFTConfigError, path_fields=("tokenizer", "output_dir"),
                                path_list_fields=("train_files",))
    values.update(overrides)
    return sft_config_from_dict(values, source=str(path))
