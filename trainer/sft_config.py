"""SFTConfig: every knob of block-diffusion SFT in one dataclass, overridable from a TOML or YAML file.

Defaults follow DICE's SFT recipe (docs/decoding.md#sft-recipe): block 4, sequences packed to 6144 tokens, samples that
do not fit dropped, lr 1e-5 constant with 3% warmup, 3 epochs, bf16. The fields every training run has (model,
optimisation, speed, output) are TrainingConfig's; this file adds SFT's and gives the shared ones their SFT defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .training_config import TrainingConfig

SCHEDULES = ("constant_with_warmup", "cosine", "linear")


class SFTConfigError(ValueError):
    """A bad SFT config value or file; the message names the field and what to do."""


@dataclass(kw_only=True)
class SFTConfig(TrainingConfig):
    """Block-diffusion SFT settings (with TrainingConfig's)."""

    kind = "SFT"
    error = SFTConfigError
    path_list_fields = ("train_files", "eval_files")

    # --- model -------------------------------------------------------------------------------------------
    model: str = "tiny"

    # --- data --------------------------------------------------------------------------------------------
    # JSONL files; each line {"prompt", "response"} (prompt already chat-formatted, e.g. the DICE end-to-end prompt),
    # {"messages": [{"role", "content"}, ...]} (the last assistant turn is trained) or {"text"} (all trained).
    train_files: list[str] = field(default_factory=list)
    # Tokens per packed row of the clean half (the model sees twice this: noisy ‖ clean). Samples longer than this
    # are dropped, as DICE's `truncate_mode: drop` does (a truncated kernel would teach the model to stop mid-code).
    seq_len: int = 6144
    # Pack several samples into one row (block-diagonal attention between them); False = one sample per row.
    packing: bool = True
    # Held-out JSONL files in the shapes train_files take (e.g. the pretraining corpus's heldout.jsonl), never
    # trained on: their diffusion loss (`eval_loss`, with the same fixed noise each time) is measured every
    # `eval_every_steps` steps and after the last. Empty: no evaluation.
    eval_files: list[str] = field(default_factory=list)
    eval_every_steps: int = 500
    # Packed rows of the held-out files scored per evaluation (the first ones of their shuffled stream).
    eval_rows: int = 64

    # --- diffusion objective (docs/decoding.md#block-diffusion-sft) -----------------------------------------
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
    # The batch's rows (per_device_batch_size, grad_accum) are packed rows of seq_len tokens.
    grad_accum: int = 1
    learning_rate: float = 1e-5
    # "constant_with_warmup" (DICE), "cosine" or "linear" decay after warmup.
    schedule: str = "constant_with_warmup"
    # Warmup as a fraction of all optimizer steps (DICE: 0.03); `warmup_steps` wins when set.
    warmup_ratio: float = 0.03
    warmup_steps: int | None = None
    # Floor of the cosine/linear decay as a fraction of learning_rate.
    min_lr_ratio: float = 0.0
    # Seeds weight init, data order and the noise (the noise of a row depends only on seed, epoch and row index,
    # so runs on 1 or N GPUs with the same global batch see identical masks).
    seed: int = 42

    # --- speed -------------------------------------------------------------------------------------------
    gradient_checkpointing: bool = False
    # bf16 dense matmul peak of one device in TFLOP/s for the MFU readout; None = look it up from the device name.
    peak_tflops: float | None = None

    # --- output ------------------------------------------------------------------------------------------
    # Also `loss_curve.png`. Steps (saving, logging) are optimizer steps.
    output_dir: str = "runs/sft"
    save_every_steps: int = 500
    log_every_steps: int = 10

    def own_field_checks(self) -> list[tuple[str, bool, str]]:
        return [
            ("seq_len", self.seq_len >= 1, "must be >= 1"),
            ("eval_every_steps", self.eval_every_steps >= 1, "must be >= 1"),
            ("eval_rows", self.eval_rows >= 1, "must be >= 1"),
            ("epochs", self.epochs > 0, "must be > 0"),
            ("max_steps", self.max_steps is None or self.max_steps >= 1, "must be >= 1 or unset"),
            ("schedule", self.schedule in SCHEDULES, f"must be one of {SCHEDULES}"),
            ("warmup_ratio", 0 <= self.warmup_ratio < 1, "must be in [0, 1)"),
            ("warmup_steps", self.warmup_steps is None or self.warmup_steps >= 0, "must be >= 0 or unset"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "must be in [0, 1]"),
            ("noise_eps", 0 < self.noise_eps < 1, "must be in (0, 1)"),
            ("max_noise_retries", self.max_noise_retries >= 1, "must be >= 1"),
        ]


load_sft_config = SFTConfig.load
