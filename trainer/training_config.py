"""TrainingConfig: the fields an SFT run and an RL run share (model, optimisation, speed, output), their rules, and
reading a TOML or YAML file of a config's fields. SFTConfig and RLConfig add their own fields and defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .config_files import config_from_dict, read_config_values

MIXED_PRECISION = ("bf16", "fp16", "no")
ATTENTION_BACKENDS = ("auto", "flex", "dense")
SAVE_DTYPES = ("bfloat16", "float16", "float32")
# Fields holding one path, resolved against a config file's folder when read with `TrainingConfig.load`.
PATH_FIELDS = ("tokenizer", "output_dir", "init_weights")


@dataclass(kw_only=True)
class TrainingConfig:
    """Settings every training run has. A field without a default here takes the trainer's (SFTConfig, RLConfig).
    Paths are relative to the working directory (or to the config file's folder when read with `load`)."""

    # What messages call the config ("SFT", "RL"), the error a bad value or file raises, and the fields holding
    # lists of paths (resolved against the config file's folder, as `tokenizer` and `output_dir` are).
    kind: ClassVar[str]
    error: ClassVar[type[ValueError]]
    path_list_fields: ClassVar[tuple[str, ...]]

    # --- model -------------------------------------------------------------------------------------------
    # A size preset of `DiceConfig.from_name` ("tiny", "small", "base", "dice-1.7b", "dice-4b", "dice-8b") to train
    # from scratch, or a checkpoint folder: SDAR/DICE (model_type "sdar") or a plain causal Qwen3 (a mask token is
    # added to its tokenizer and, when needed, to its embeddings).
    model: str
    # Tokenizer folder (HF layout, e.g. from `dice-copilot train tokenizer`); required for presets, optional for
    # checkpoints (their own tokenizer is used by default).
    tokenizer: str | None = None
    # DiceConfig field overrides for from-scratch presets, e.g. {num_hidden_layers = 4}.
    model_overrides: dict[str, Any] = field(default_factory=dict)
    # Block size to train at; None keeps the checkpoint's (DICE: 4). Inference must use the same value.
    block_size: int | None = None
    # A checkpoint folder (HF layout, bf16 or fp32) whose weights replace the model's before the first step of a run
    # that finds no state to resume: the exported checkpoint of an interrupted run whose `state/` was lost (a fresh
    # machine that got only the weights back). The architecture still comes from `model`; the shapes must match.
    init_weights: str | None = None

    # --- optimisation ------------------------------------------------------------------------------------
    # Rows per GPU per micro-step.
    per_device_batch_size: int = 1
    # Micro-steps per optimizer step. Global batch = per_device_batch_size * grad_accum * number of processes.
    grad_accum: int
    learning_rate: float
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    # Global gradient-norm clip; 0 disables clipping.
    max_grad_norm: float = 1.0
    seed: int

    # --- continuing from weights alone (init_weights) ----------------------------------------------------
    # Steps an earlier run of this training already took: the run counts, schedules and seeds its steps from
    # here, as the uninterrupted run would have. Needs `init_weights` (the weights those steps made).
    start_step: int = 0
    # Data rows the earlier run consumed (SFT: packed rows of the row stream; RL: tasks of the task files): the
    # next step reads from this row on, so no row is seen twice or skipped.
    data_offset_rows: int = 0
    # A continuation's optimizer starts without its moments: the learning rate ramps up linearly over this many
    # steps after `start_step` (on top of the schedule). Not applied to a run that resumes from a state.
    resume_warmup_steps: int = 0

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
    gradient_checkpointing: bool
    # "flex": flex-attention BlockMask (GPU, compiled); "dense": boolean mask through SDPA; "auto": flex on CUDA
    # when `compile` is on, dense otherwise.
    attention_backend: str = "auto"
    # torch.compile each decoder layer on CUDA (needed for fast flex-attention); ignored on CPU.
    compile: bool = True

    # --- output ------------------------------------------------------------------------------------------
    # Run folder: `checkpoint/` (HF layout the server loads, replaced atomically), `state/step-N/` (exact resume),
    # `tensorboard/`, `metrics.jsonl`, and what the trainer adds.
    output_dir: str
    # Write the HF checkpoint and a resumable state every N steps (and always at the end); 0 = end only.
    save_every_steps: int
    # Weight dtype of the exported HF checkpoint ("bfloat16" as DICE ships, "float16" or "float32").
    save_dtype: str = "bfloat16"
    # Largest weight file of the exported checkpoint in bytes (a larger model is sharded); None: Hugging Face's
    # default (5 GB). A single tensor larger than this gets a file of its own.
    max_shard_bytes: int | None = None
    # Stop after the first step that ends this many minutes after the run started, writing the checkpoint and a
    # state as at the end (a machine that allows commands of limited length); None: no limit.
    max_minutes: float | None = None
    # Resumable states kept on disk (older ones are deleted).
    keep_last_states: int = 2
    # Continue from the newest state in output_dir/state when one exists.
    resume: bool = True
    # Log to metrics.jsonl / TensorBoard every N steps.
    log_every_steps: int
    tensorboard: bool = True
    progress_bar: bool = True

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise the config's error naming the first bad field: the trainer's own fields are checked first."""
        for name, ok, rule in self.own_field_checks() + self._shared_field_checks():
            if not ok:
                raise self.error(f"{self.kind} config field {name!r} = {getattr(self, name)!r} {rule}")

    def own_field_checks(self) -> list[tuple[str, bool, str]]:
        """(field, ok, rule) for the fields the trainer's config adds."""
        return []

    def _shared_field_checks(self) -> list[tuple[str, bool, str]]:
        return [
            ("per_device_batch_size", self.per_device_batch_size >= 1, "must be >= 1"),
            ("grad_accum", self.grad_accum >= 1, "must be >= 1"),
            ("learning_rate", self.learning_rate > 0, "must be > 0"),
            ("max_grad_norm", self.max_grad_norm >= 0, "must be >= 0"),
            ("mixed_precision", self.mixed_precision in MIXED_PRECISION, f"must be one of {MIXED_PRECISION}"),
            ("attention_backend", self.attention_backend in ATTENTION_BACKENDS,
             f"must be one of {ATTENTION_BACKENDS}"),
            ("block_size", self.block_size is None or self.block_size >= 1, "must be >= 1 or unset"),
            ("start_step", self.start_step >= 0, "must be >= 0"),
            ("start_step", self.start_step == 0 or self.init_weights is not None,
             "needs init_weights: the checkpoint those steps made"),
            ("data_offset_rows", self.data_offset_rows >= 0, "must be >= 0"),
            ("resume_warmup_steps", self.resume_warmup_steps >= 0, "must be >= 0"),
            ("save_dtype", self.save_dtype in SAVE_DTYPES, f"must be one of {SAVE_DTYPES}"),
            ("save_every_steps", self.save_every_steps >= 0, "must be >= 0"),
            ("max_shard_bytes", self.max_shard_bytes is None or self.max_shard_bytes >= 1, "must be >= 1 or unset"),
            ("max_minutes", self.max_minutes is None or self.max_minutes > 0, "must be > 0 or unset"),
            ("keep_last_states", self.keep_last_states >= 1, "must be >= 1"),
            ("log_every_steps", self.log_every_steps >= 1, "must be >= 1"),
        ]

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config"):
        """The config from a mapping, rejecting unknown keys with the list of known ones."""
        return config_from_dict(cls, values, cls.kind, cls.error, source)

    @classmethod
    def load(cls, path: str | Path, **overrides):
        """Read a TOML (.toml) or YAML (.yaml/.yml) file over the defaults; relative paths are taken from the file's
        folder (`model` too when that folder holds it). `overrides` (e.g. from the command line) win over the file."""
        values = read_config_values(path, cls.kind, cls.error, path_fields=PATH_FIELDS,
                                    path_list_fields=cls.path_list_fields)
        values.update(overrides)
        return cls.from_dict(values, source=str(path))
