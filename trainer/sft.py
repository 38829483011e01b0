"""Block-diffusion SFT with `accelerate`: one GPU, DDP, FSDP or several nodes; exact resume; HF checkpoints.

`dice-copilot train sft CONFIG` (single process) or `accelerate launch --config_file trainer/accelerate_configs/
<setup>.yaml -m dice_copilot.cli train sft CONFIG` (several). The objective is in `sft_loss.py`, the data order in
`sft_data.py`; this file builds the model, runs the optimizer loop, logs and saves.

Loss normalisation: an optimizer step's loss is sum(CE / p) over every masked token of its global batch divided by
the global batch's answer-token count (known from the data plan before any forward). Each micro-batch backprops
its share, so gradients are the same on 1 GPU with accumulation as on N GPUs without it.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from .sft_config import SFTConfig, SFTConfigError, load_sft_config
from .sft_data import RowStream, SFTDataError, SFTSample, check_train_files, load_sft_samples
from .sft_loss import FlexMaskBuilder, add_noise, attention_pairs, dense_diffusion_mask, diffusion_loss_sum
from .tokenizer_training import MASK
from .training_run import (
    CHECKPOINT_DIR, attention_backend, continuation_warmup, make_accelerator, prepare_run, save_run, write_loss_curve,
)

LOSS_CURVE_FILE = "loss_curve.png"

# Dense bf16 tensor-core peak (no sparsity) per device, TFLOP/s, for the MFU readout when peak_tflops is unset.
KNOWN_PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "GH200": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 70.0}


class SFTError(RuntimeError):
    """An SFT run that cannot start or continue; the message says what to fix."""


@dataclass
class SFTResult:
    """What a run did: its final step and loss, where the checkpoint is, and its speed."""

    steps: int
    final_loss: float
    checkpoint_dir: Path | None
    # (step, loss) of every optimizer step of the run, resumed steps included.
    losses: list[tuple[int, float]] = field(default_factory=list)
    # Seconds per optimizer step of this process's steps (not the resumed ones), for throughput benchmarks.
    step_times: list[float] = field(default_factory=list)
    # Real (non-filler) tokens of the clean half per optimizer step, over all processes.
    tokens_per_step: list[int] = field(default_factory=list)
    # Model FLOPs per optimizer step over all processes (3x forward, as MFU is counted).
    flops_per_step: list[float] = field(default_factory=list)
    # (step, held-out loss) of every evaluation of the run (eval_files), resumed ones included.
    eval_losses: list[tuple[int, float]] = field(default_factory=list)
    # Packed rows of the row stream consumed so far: where the next step would read.
    rows_consumed: int = 0
    # Steps the run was to take in all; `steps` is less when max_minutes stopped it first.
    planned_steps: int = 0


# --- model and tokenizer -------------------------------------------------------------------------------------


def load_tokenizer_dir(path: str | Path):
    """A DiceTokenizer from a tokenizer folder; the mask id is config.json's or that of the `<|MASK|>` token."""
    from tokenizers import Tokenizer

    from dice_copilot.model.tokenizer import DiceTokenizer, TokenizerError

    folder = Path(path)
    tokenizer_file = folder / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise SFTError(f"{tokenizer_file} is missing; make one with `dice-copilot train tokenizer`")
    config_file = folder / "config.json"
    mask_id = json.loads(config_file.read_text()).get("mask_token_id") if config_file.is_file() else None
    if mask_id is None:
        mask_id = Tokenizer.from_file(str(tokenizer_file)).token_to_id(MASK)
    if mask_id is None:
        raise SFTError(f"{tokenizer_file} has no {MASK} token; retrain it with `dice-copilot train tokenizer`")
    try:
        return DiceTokenizer.from_dir(folder, mask_token_id=mask_id)
    except TokenizerError as err:
        raise SFTError(str(err)) from err


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def build_model_and_tokenizer(config: SFTConfig):
    """(model in fp32 on the CPU, tokenizer): a fresh preset sized to the tokenizer, or a loaded checkpoint."""
    from dice_copilot.model.config import PRESETS, DiceConfig
    from dice_copilot.model.network import DiceForBlockDiffusion

    if config.model in PRESETS:
        if config.tokenizer is None:
            raise SFTError(
                f"model = {config.model!r} trains from scratch and needs a tokenizer folder: set `tokenizer` "
                f"(make one with `dice-copilot train tokenizer`)"
            )
        tokenizer = load_tokenizer_dir(config.tokenizer)
        sizes = dict(
            vocab_size=_round_up(tokenizer.vocab_size, 64), mask_token_id=tokenizer.mask_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
        )
        if config.block_size is not None:
            sizes["block_size"] = config.block_size
        try:
            model_config = DiceConfig.from_name(config.model, **{**sizes, **config.model_overrides})
        except (TypeError, ValueError) as err:
            raise SFTError(f"model_overrides {config.model_overrides} do not fit preset {config.model!r}: {err}")
        torch.manual_seed(config.seed)
        return DiceForBlockDiffusion(model_config), tokenizer
    return _load_checkpoint_for_training(config)


def _load_checkpoint_for_training(config: SFTConfig):
    from dice_copilot.model import CheckpointError, load

    folder = Path(config.model).expanduser()
    if not folder.is_dir():
        from dice_copilot.model.config import PRESETS

        raise SFTError(
            f"model = {config.model!r} is neither a preset ({', '.join(PRESETS)}) nor a checkpoint folder"
        )
    try:
        model, tokenizer = load(folder, device="cpu", dtype=torch.float32)
    except CheckpointError as err:
        raise SFTError(f"cannot load {folder} for training: {err}") from err
    if config.tokenizer is not None:
        tokenizer = load_tokenizer_dir(config.tokenizer)
    if json.loads((folder / "config.json").read_text()).get("model_type") == "qwen3":
        tokenizer = _add_mask_token(model, tokenizer, folder if config.tokenizer is None else Path(config.tokenizer))
    if config.block_size is not None:
        model.config = replace(model.config, block_size=config.block_size)
    model.config = replace(model.config, untrained=False)
    return model.train(), tokenizer


def _add_mask_token(model, tokenizer, tokenizer_dir: Path):
    """Turn a causal Qwen3 into a block-diffusion one: give its tokenizer a `<|MASK|>` token and make sure the
    embeddings have a row for it (Qwen3's 151936 rows already cover SDAR's id 151669)."""
    from tokenizers import AddedToken, Tokenizer

    from dice_copilot.model.tokenizer import DiceTokenizer

    raw = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    if raw.token_to_id(MASK) is None:
        raw.add_special_tokens([AddedToken(MASK, special=True, normalized=False)])
    mask_id = raw.token_to_id(MASK)
    if mask_id >= model.config.vocab_size:
        resize_vocabulary(model, _round_up(mask_id + 1, 64))
    model.config = replace(model.config, mask_token_id=mask_id)
    return DiceTokenizer(raw, mask_id, tokenizer.pad_token_id, source_dir=tokenizer_dir)


def resize_vocabulary(model, new_size: int) -> None:
    """Grow the embedding (and an untied lm_head) to `new_size` rows; new rows start at the mean embedding."""
    old = model.model.embed_tokens.weight.data
    grown = torch.cat([old, old.mean(0, keepdim=True).expand(new_size - old.shape[0], -1)])
    model.model.embed_tokens = torch.nn.Embedding(new_size, old.shape[1])
    model.model.embed_tokens.weight.data.copy_(grown)
    if model.config.tie_word_embeddings:
        model.lm_head = torch.nn.Linear(old.shape[1], new_size, bias=False)
        model.lm_head.weight = model.model.embed_tokens.weight
    else:
        head = model.lm_head.weight.data
        model.lm_head = torch.nn.Linear(old.shape[1], new_size, bias=False)
        model.lm_head.weight.data.copy_(torch.cat([head, head.mean(0, keepdim=True).expand(new_size - head.shape[0], -1)]))
    model.config = replace(model.config, vocab_size=new_size)


# --- FLOPs and peak ---------------------------------------------------------------------------------------------


def step_flops(model_config, sample_lengths: list[list[int]]) -> float:
    """Useful training FLOPs (3x forward) of micro-batch rows, filler excluded: linear layers on both halves
    (2n tokens per sample of n), the LM head on the noisy half (n), and the attention pairs the mask allows."""
    c = model_config
    q_dim, kv_dim = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    linear_per_layer = c.hidden_size * (2 * q_dim + 2 * kv_dim) + 3 * c.hidden_size * c.intermediate_size
    forward = 0.0
    for lengths in sample_lengths:
        tokens = sum(lengths)
        forward += 2 * linear_per_layer * c.num_hidden_layers * 2 * tokens
        forward += 2 * c.hidden_size * c.vocab_size * tokens
        forward += 4 * q_dim * c.num_hidden_layers * attention_pairs(lengths, c.block_size)
    return 3 * forward


def device_peak_flops(config: SFTConfig, device: torch.device) -> float | None:
    """Peak FLOP/s of one device for MFU: the configured value, or the known bf16 peak of a named GPU."""
    if config.peak_tflops is not None:
        return config.peak_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in KNOWN_PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


# --- schedule ---------------------------------------------------------------------------------------------------


def lr_multiplier(step: int, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate factor at `step`: linear warmup over `warmup_steps`, then constant, or cosine/linear decay to
    min_lr_ratio at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant_with_warmup":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1 - progress
    return min_lr_ratio + (1 - min_lr_ratio) * decay


# --- the run ----------------------------------------------------------------------------------------------------


@dataclass
class TrainerState:
    """Saved with every resumable state: where the run is and what it logged so far."""

    step: int = 0
    # Rows per optimizer step when saved.
    global_rows: int = 0
    # Stream rows consumed: the next step reads rows [rows_consumed, rows_consumed + global_rows).
    rows_consumed: int = 0
    # The step at which the optimizer and scheduler of this run were created: 0, or a continuation's start_step.
    optimizer_start_step: int = 0
    losses: list[list[float]] = field(default_factory=list)  # [step, loss]
    eval_losses: list[list[float]] = field(default_factory=list)  # [step, held-out loss]
    config: dict = field(default_factory=dict)


def train_sft(config: SFTConfig) -> SFTResult:
    """Run SFT as configured (in this process; under `accelerate launch` in each of its processes)."""
    check_train_files(config.train_files)
    missing = [f for f in config.eval_files if not Path(f).is_file()]
    if missing:
        raise SFTDataError(f"held-out file(s) in eval_files not found: {', '.join(missing)}")
    accelerator = make_accelerator(config)
    model, tokenizer = build_model_and_tokenizer(config)
    samples, stats = load_sft_samples(
        config.train_files, tokenizer, model.config.block_size, model.config.pad_token_id, config.seq_len
    )
    if accelerator.is_main_process:
        print(
            f"sft: {stats.kept} samples ({stats.dropped_too_long} of {stats.records} dropped: longer than seq_len "
            f"{config.seq_len} or empty), {stats.tokens} tokens, {stats.answer_tokens} trained; "
            f"model {model.config.num_parameters / 1e6:.1f}M parameters",
            file=sys.stderr,
        )
    held_out = []
    if config.eval_files:
        held_out, _ = load_sft_samples(
            config.eval_files, tokenizer, model.config.block_size, model.config.pad_token_id, config.seq_len
        )
    return run_training(config, model, tokenizer, samples, accelerator, held_out=held_out)


def run_training(config: SFTConfig, model, tokenizer, samples: list[SFTSample], accelerator=None,
                 save_outputs: bool = True, held_out: list[SFTSample] = ()) -> SFTResult:
    """The optimizer loop over a model and tokenized samples; the loss on `held_out` samples is measured every
    eval_every_steps steps and at the end. Benchmarks call it directly with `save_outputs=False`: no resumable
    states, no HF checkpoint, no loss curve (tokenizer may then be None)."""
    accelerator = accelerator or make_accelerator(config)
    output_dir = Path(config.output_dir)
    model_config = model.config
    world, rank = accelerator.num_processes, accelerator.process_index
    device = accelerator.device
    build_mask = FlexMaskBuilder() if attention_backend(config, device) == "flex" else dense_diffusion_mask

    stream = RowStream(samples, config.seq_len, config.packing, config.seed)
    global_rows = config.per_device_batch_size * config.grad_accum * world
    rows_per_epoch = len(stream.epoch_rows(0))
    total_steps = config.max_steps or max(1, math.ceil(config.epochs * rows_per_epoch / global_rows))
    warmup = config.warmup_steps if config.warmup_steps is not None else math.ceil(config.warmup_ratio * total_steps)
    if config.start_step > total_steps:
        raise SFTError(f"start_step {config.start_step} is past the run's {total_steps} steps; raise max_steps")

    def resume_warning(saved: dict) -> str | None:
        if saved["global_rows"] == global_rows:
            return None
        return (f"the global batch changed from {saved['global_rows']} to {global_rows} rows; training continues at "
                f"the next row of the data stream with other batches, which is not an exact resume")

    # The scheduler counts from the step its optimizer was created at (a continuation's start_step; a resumed
    # state says its own), so that the schedule of step s is the same however the run got there.
    optimizer_start = [config.start_step]

    def lr_factor(count: int) -> float:
        step = optimizer_start[0] + count
        return (lr_multiplier(step, config.schedule, warmup, total_steps, config.min_lr_ratio)
                * continuation_warmup(step, optimizer_start[0], config.resume_warmup_steps))

    run = prepare_run(
        config, model, accelerator, "sft", total_steps, fixed_shapes=True, resume_warning=resume_warning,
        make_scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor),
    )
    model, optimizer, scheduler, logger = run.model, run.optimizer, run.scheduler, run.logger
    state = TrainerState(step=config.start_step, global_rows=global_rows, rows_consumed=config.data_offset_rows,
                         optimizer_start_step=config.start_step, config=asdict(config))
    if run.saved is not None:
        saved = run.saved
        state = replace(state, step=saved["step"], losses=saved["losses"],
                        rows_consumed=saved.get("rows_consumed", saved["step"] * saved["global_rows"]),
                        optimizer_start_step=saved.get("optimizer_start_step", 0),
                        eval_losses=saved.get("eval_losses", []))
        optimizer_start[0] = state.optimizer_start_step
    held_out_loss = _HeldOutLoss(config, held_out, model_config, accelerator, build_mask) if held_out else None
    peak = device_peak_flops(config, device)
    first_step = state.step
    result = SFTResult(steps=state.step, final_loss=float("nan"), checkpoint_dir=None,
                       losses=[(int(s), float(v)) for s, v in state.losses], planned_steps=total_steps)
    try:
        for step in range(first_step, total_steps):
            started = time.perf_counter()
            first_row = state.rows_consumed
            answer_tokens = stream.answer_tokens(range(first_row, first_row + global_rows))
            loss_sum = torch.zeros((), device=device, dtype=torch.float64)
            counts = torch.zeros(3, device=device, dtype=torch.float64)  # masked tokens, real tokens, flops
            for micro in range(config.grad_accum):
                start = first_row + (micro * world + rank) * config.per_device_batch_size
                batch = stream.batch(range(start, start + config.per_device_batch_size), model_config.pad_token_id)
                noised = add_noise(batch, model_config.mask_token_id, config.noise_eps, config.max_noise_retries,
                                   config.seed)
                batch, noised = batch.to(device), noised.to(device)
                attn_mask = build_mask(batch, model_config.block_size)
                last_micro = micro == config.grad_accum - 1
                # accelerate autocasts the prepared model's forward, except under FSDP2, where it leaves the
                # casts to the FSDP precision policy (ours gathers fp32 weights): autocast here for every setup.
                with contextlib.nullcontext() if last_micro else accelerator.no_sync(model), accelerator.autocast():
                    micro_loss_sum, masked = diffusion_loss_sum(model, batch, noised, attn_mask)
                    accelerator.backward(micro_loss_sum * (world / answer_tokens))
                loss_sum += micro_loss_sum.detach().double()
                flops = step_flops(model_config, batch.sample_lengths)
                counts += torch.tensor([0.0, batch.real_tokens, flops], device=device, dtype=torch.float64)
                counts[0] += masked
            grad_norm = (
                accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                if config.max_grad_norm > 0 else None
            )
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

            masked_total, loss_total, real_tokens, flops = accelerator.reduce(
                torch.cat([counts[:1], loss_sum[None], counts[1:]]), reduction="sum"
            ).tolist()
            loss = loss_total / answer_tokens
            elapsed = time.perf_counter() - started
            state.step = step + 1
            state.rows_consumed += global_rows
            state.losses.append([state.step, loss])
            result.losses.append((state.step, loss))
            result.step_times.append(elapsed)
            result.tokens_per_step.append(int(real_tokens))
            result.flops_per_step.append(flops)
            tokens_per_s = real_tokens / elapsed
            mfu = None if peak is None else flops / (elapsed * peak * world)
            postfix = {"loss": f"{loss:.4f}", "tok/s": f"{tokens_per_s:.0f}"}
            if mfu is not None:
                postfix["mfu"] = f"{100 * mfu:.1f}%"
            stopping = state.step == total_steps or run.past_deadline()
            eval_loss = None
            if held_out_loss is not None and (state.step % config.eval_every_steps == 0 or stopping):
                eval_loss = held_out_loss(model)
                state.eval_losses.append([state.step, eval_loss])
            logger.log_step(
                state.step, postfix, loss=loss, lr=scheduler.get_last_lr()[0],
                grad_norm=None if grad_norm is None else float(grad_norm),
                masked_fraction=masked_total / answer_tokens, tokens_per_s=tokens_per_s, mfu=mfu,
                epoch=stream.epoch_of(first_row), eval_loss=eval_loss,
            )
            periodic = config.save_every_steps and state.step % config.save_every_steps == 0
            if save_outputs and (periodic or stopping):
                save_run(accelerator, model, tokenizer, state, config, output_dir)
            if stopping:
                break
    finally:
        logger.close()
    result.steps = state.step
    result.rows_consumed = state.rows_consumed
    result.final_loss = state.losses[-1][1] if state.losses else float("nan")
    result.eval_losses = [(int(s), float(v)) for s, v in state.eval_losses]
    checkpoint = output_dir / CHECKPOINT_DIR
    result.checkpoint_dir = checkpoint if save_outputs and checkpoint.is_dir() else None
    if save_outputs and accelerator.is_main_process:
        write_loss_curve(state.losses, output_dir / LOSS_CURVE_FILE)
    accelerator.wait_for_everyone()
    return result


class _HeldOutLoss:
    """The diffusion loss on held-out samples under the current weights: the first eval_rows packed rows of their
    own stream (epoch 0 of the run's seed), with the same fixed noise at every evaluation, so that evaluations of
    one run (and of runs with the same seed) compare. Each process scores every world-th row; all run the same
    number of forwards (a share that runs short scores a zero-weighted copy), as FSDP's collectives need."""

    def __init__(self, config: SFTConfig, samples: list[SFTSample], model_config, accelerator, build_mask):
        self.config, self.model_config, self.accelerator, self.build_mask = config, model_config, accelerator, build_mask
        self.stream = RowStream(samples, config.seq_len, config.packing, config.seed)
        rows = range(min(config.eval_rows, len(self.stream.epoch_rows(0))))
        world, size = accelerator.num_processes, config.per_device_batch_size
        mine = list(rows[accelerator.process_index::world])
        chunks = math.ceil(math.ceil(len(rows) / world) / size)
        self.batches = [mine[c * size:(c + 1) * size] for c in range(chunks)]
        self.answer_tokens = self.stream.answer_tokens(rows)

    @torch.no_grad()
    def __call__(self, model) -> float:
        config, device = self.config, self.accelerator.device
        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        for rows in self.batches:
            weight = 1.0 if rows else 0.0
            batch = self.stream.batch(rows or [0], self.model_config.pad_token_id)
            noised = add_noise(batch, self.model_config.mask_token_id, config.noise_eps, config.max_noise_retries,
                               config.seed)
            batch, noised = batch.to(device), noised.to(device)
            with self.accelerator.autocast():
                part, _ = diffusion_loss_sum(model, batch, noised, self.build_mask(batch, self.model_config.block_size))
            loss_sum += weight * part.double()
        return float(self.accelerator.reduce(loss_sum, reduction="sum")) / self.answer_tokens


# --- command line -----------------------------------------------------------------------------------------------


def parse_overrides(items: list[str]) -> dict:
    """KEY=VALUE pairs from the command line; VALUE is read as TOML (numbers, booleans, lists) or else a string."""
    import tomllib

    values = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SFTConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            values[key.strip()] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            values[key.strip()] = raw
    return values


def run_train_sft(args) -> int:
    """`dice-copilot train sft` (declared in trainer/commands.py)."""
    try:
        config = load_sft_config(args.config, **parse_overrides(args.set))
        result = train_sft(config)
    except (SFTConfigError, SFTDataError, SFTError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result.checkpoint_dir is not None:
        print(f"sft: {result.steps} steps, final loss {result.final_loss:.4f}; checkpoint {result.checkpoint_dir}")
    return 0
