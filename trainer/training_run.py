"""What an SFT run and an RL run share around their loops: the accelerator, the setup before the first step (model
and optimizer prepared, the newest saved state loaded, the logger), the saved checkpoints and states, the curve.

A run folder holds `checkpoint/` (the HF layout the server loads, replaced atomically, with `training_position.json`:
the steps and data rows that made those weights), `state/step-N/` (accelerate's state plus `trainer_state.json`: what
an exact resume needs), `metrics.jsonl` and `tensorboard/`.

Two ways to continue an interrupted run: from its newest state (exact: optimizer moments, scheduler, data position),
or, where only the exported checkpoint survived, from its weights (`init_weights`) at the position its
training_position.json records (`start_step`, `data_offset_rows`), with a fresh optimizer whose learning rate ramps
up over `resume_warmup_steps`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from .training_config import TrainingConfig

STATE_DIR = "state"
CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE_FILE = "trainer_state.json"
METRICS_FILE = "metrics.jsonl"
# In the exported checkpoint: {"step", "rows_consumed"} of the weights, what a weights-only continuation starts from.
POSITION_FILE = "training_position.json"


def make_accelerator(config: TrainingConfig):
    from accelerate import Accelerator

    # Without CUDA, processes started by torchrun/accelerate form a gloo (CPU) group: how the tests exercise DDP.
    on_cpu = not torch.cuda.is_available()
    accelerator = Accelerator(
        mixed_precision="no" if on_cpu else config.mixed_precision, project_dir=config.output_dir, cpu=on_cpu
    )
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None and accelerator.mixed_precision != "no":
        plugin.mixed_precision_policy = fsdp_mixed_precision_policy(config, plugin.fsdp_version)
    return accelerator


def fsdp_mixed_precision_policy(config: TrainingConfig, fsdp_version: int):
    """The FSDP precision policy the config asks for (see `fsdp_gather_in_mixed_precision` in TrainingConfig): fp32
    unless a knob names the mixed dtype; the training loop's autocast casts for the matmuls."""
    mixed = {"bf16": torch.bfloat16, "fp16": torch.float16}[config.mixed_precision]
    gather = mixed if config.fsdp_gather_in_mixed_precision else torch.float32
    reduce = mixed if config.fsdp_reduce_in_mixed_precision else torch.float32
    if fsdp_version == 1:
        from torch.distributed.fsdp import MixedPrecision

        return MixedPrecision(param_dtype=gather, reduce_dtype=reduce, buffer_dtype=torch.float32)
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=gather, reduce_dtype=reduce, output_dtype=gather)


@dataclass
class PreparedRun:
    """A run ready for its first step."""

    # The model and optimizer as accelerate prepared them (wrapped for DDP/FSDP), and the scheduler if the run has one.
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    # The trainer_state.json of the state the run resumed from; None for a run that found no state.
    saved: dict | None
    logger: "RunLogger"
    # When the run should stop (time.monotonic() seconds; config.max_minutes after the setup began), or None.
    deadline: float | None = None

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def prepare_run(config: TrainingConfig, model, accelerator, name: str, total_steps: int, *, fixed_shapes: bool,
                make_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
                resume_warning: Callable[[dict], str | None] | None = None) -> PreparedRun:
    """The setup both trainers share, in the order accelerate needs it: the model in training mode on this process's
    device (gradient checkpointing as configured; each layer compiled on CUDA, for one shape when `fixed_shapes`),
    AdamW, both prepared together (FSDP2 re-points the optimizer at the sharded parameters), the scheduler built on
    the prepared optimizer and registered for checkpointing, then the newest complete state in output_dir/state
    loaded (when config.resume) — or, where there is none, the weights of config.init_weights — and the run's logger.
    `name` ("sft", "rl") prefixes its messages; `resume_warning` says, from the saved trainer state, why a resume
    would not be exact (None: it is)."""
    started = time.monotonic()
    output_dir = Path(config.output_dir)
    latest = latest_state(output_dir) if config.resume else None
    if latest is None and config.init_weights is not None:
        load_initial_weights(model, config)
        if accelerator.is_main_process:
            print(f"{name}: continuing from the weights of {config.init_weights} at step {config.start_step}, data "
                  f"row {config.data_offset_rows}, with a fresh optimizer", file=sys.stderr)
    device = accelerator.device
    model.gradient_checkpointing = config.gradient_checkpointing
    model.train()
    if device.type == "cuda" and config.compile:
        for layer in model.model.layers:
            layer.compile(dynamic=False if fixed_shapes else None)
    # The fused AdamW kernel wants its parameters on the GPU when it is built.
    model.to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon, weight_decay=config.weight_decay, fused=device.type == "cuda" and config.fused_adamw,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    scheduler = make_scheduler(optimizer) if make_scheduler is not None else None
    if scheduler is not None:
        accelerator.register_for_checkpointing(scheduler)

    saved = None
    if latest is not None:
        accelerator.load_state(str(latest))
        saved = json.loads((latest / TRAINER_STATE_FILE).read_text())
        if accelerator.is_main_process:
            print(f"{name}: resumed from {latest} at step {saved['step']}/{total_steps}", file=sys.stderr)
            warning = resume_warning(saved) if resume_warning is not None else None
            if warning:
                print(f"{name}: warning: {warning}", file=sys.stderr)
    first_step = saved["step"] if saved is not None else config.start_step
    logger = RunLogger(config, output_dir, accelerator.is_main_process, first_step, total_steps, name)
    deadline = started + 60 * config.max_minutes if config.max_minutes is not None else None
    return PreparedRun(model, optimizer, scheduler, saved, logger, deadline)


def load_initial_weights(model, config: TrainingConfig) -> None:
    """Copy the weights of the checkpoint folder config.init_weights into `model` (fp32 master weights from bf16 or
    fp32 files); a checkpoint of another shape is the config's error."""
    from dice_copilot.model import CheckpointError, load

    try:
        source, _ = load(config.init_weights, device="cpu", dtype=torch.float32)
        model.load_state_dict(source.state_dict())
    except (CheckpointError, RuntimeError) as err:
        raise config.error(f"init_weights = {config.init_weights!r} cannot start this run's model: {err}") from err


def continuation_warmup(step: int, optimizer_start_step: int, warmup_steps: int) -> float:
    """Learning-rate factor at `step` for an optimizer created at `optimizer_start_step` without its moments (a
    weights-only continuation): a linear ramp over `warmup_steps`; 1 for an optimizer that started at step 0."""
    if optimizer_start_step == 0 or warmup_steps == 0:
        return 1.0
    return min(1.0, (step - optimizer_start_step + 1) / (warmup_steps + 1))


def latest_state(output_dir: Path) -> Path | None:
    states = sorted((output_dir / STATE_DIR).glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    complete = [p for p in states if (p / TRAINER_STATE_FILE).is_file()]
    return complete[-1] if complete else None


def attention_backend(config: TrainingConfig, device: torch.device) -> str:
    if config.attention_backend != "auto":
        return config.attention_backend
    return "flex" if device.type == "cuda" and config.compile else "dense"


class RunLogger:
    """Progress bar, metrics.jsonl and TensorBoard scalars (main process only) of a training run (the config's
    log_every_steps, tensorboard and progress_bar)."""

    def __init__(self, config: TrainingConfig, output_dir: Path, is_main: bool, first_step: int, total_steps: int,
                 name: str):
        self.config = config
        self.active = is_main
        self.writer = None
        self.bar = None
        if not is_main:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        keep_steps_up_to(output_dir / METRICS_FILE, first_step)
        self.metrics = (output_dir / METRICS_FILE).open("a")
        if config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(output_dir / "tensorboard"), purge_step=first_step or None)
        if config.progress_bar:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_steps, initial=first_step, desc=name, unit="step", dynamic_ncols=True)

    def log_step(self, step: int, postfix: dict[str, str], **values) -> None:
        """One step: `postfix` for the progress bar, `values` (None ones left out) for the logs."""
        if not self.active:
            return
        if self.bar is not None:
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(1)
        if step % self.config.log_every_steps == 0 or step == 1:
            record = {"step": step, **{k: v for k, v in values.items() if v is not None}}
            self.metrics.write(json.dumps(record) + "\n")
            self.metrics.flush()
            if self.writer is not None:
                for name, value in record.items():
                    if name != "step":
                        self.writer.add_scalar(f"train/{name}", value, step)

    def close(self) -> None:
        if not self.active:
            return
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        self.metrics.close()


def keep_steps_up_to(path: Path, step: int) -> None:
    """Drop the records of a JSONL log with a "step" past `step`: those a resumed run is about to redo (steps taken
    after the state it resumes from), which would otherwise be in the log twice."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.strip() or json.loads(line).get("step", 0) <= step]
    if len(kept) < len(lines):
        path.write_text("".join(kept))


def save_run(accelerator, model, tokenizer, state, config: TrainingConfig, output_dir: Path) -> None:
    """Write the HF checkpoint the server loads (checkpoint/, replaced atomically by `dice_copilot.model.save`, with
    its training_position.json), then the resumable state (state/step-N, written to a temp folder and renamed when
    complete). `state` is the trainer's state dataclass, saved as trainer_state.json; it has the `step` it was saved
    at and the `rows_consumed` of the data."""
    states = output_dir / STATE_DIR
    final = states / f"step-{state.step}"
    staging = states / f".step-{state.step}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging), safe_serialization=False)
    full_state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        from dice_copilot.model import save

        position = {"step": state.step, "rows_consumed": state.rows_consumed}
        shards = {} if config.max_shard_bytes is None else {"max_shard_bytes": config.max_shard_bytes}
        save(export_model(accelerator.unwrap_model(model).config, full_state, config.save_dtype), tokenizer,
             output_dir / CHECKPOINT_DIR, extra_files={POSITION_FILE: json.dumps(position) + "\n"}, **shards)
    if accelerator.is_main_process:
        (staging / TRAINER_STATE_FILE).write_text(json.dumps(asdict(state)) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        for old in sorted(states.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[:-config.keep_last_states]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def export_model(model_config, state_dict: dict[str, torch.Tensor], dtype_name: str):
    """A CPU copy of the trained weights in the export dtype, for `dice_copilot.model.save`."""
    from dice_copilot.model.checkpoint import resolve_dtype
    from dice_copilot.model.network import DiceForBlockDiffusion

    dtype = resolve_dtype(dtype_name, model_config.torch_dtype)
    with torch.device("meta"):
        exported = DiceForBlockDiffusion(model_config)
    weights = {name: t.detach().to("cpu", dtype) for name, t in state_dict.items() if name in exported.state_dict()}
    exported.load_state_dict(weights, strict=False, assign=True)
    if model_config.tie_word_embeddings:
        exported.lm_head.weight = exported.model.embed_tokens.weight
    exported.config = replace(model_config, torch_dtype={torch.bfloat16: "bfloat16", torch.float16: "float16",
                                                          torch.float32: "float32"}[dtype], untrained=False)
    return exported.eval()


def write_loss_curve(losses: list[list[float]], path: Path, label: str = "loss",
                     ylabel: str = "diffusion loss (CE / p per answer token)", log_scale: bool = True) -> Path | None:
    """Plot a value per step (and a moving average) to a PNG: the loss of SFT, the mean reward of RL."""
    if not losses:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s, _ in losses]
    values = [v for _, v in losses]
    window = max(1, len(values) // 50)
    smooth = [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
              for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, values, alpha=0.35, label=label)
    if window > 1:
        ax.plot(steps, smooth, label=f"moving average ({window} steps)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    if log_scale:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
