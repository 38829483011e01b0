"""BiC-RL with `accelerate`: TraceRL on execution rewards, stage 1 (kernel infilling) then stage 2 (end-to-end).

`dice-copilot train rl CONFIG` (one process) or `accelerate launch --config_file trainer/accelerate_configs/
<setup>.yaml -m dice_copilot.cli train rl CONFIG` (a process per GPU). Each RL step:
1. the rollout copy of the policy (its own weights, bf16 on a GPU, in the BlockDiffusionEngine with continuous
   batching) takes the step's weights and samples `group_size` responses for each of this process's share of the
   step's tasks, recording the pass at which every token was committed;
2. the strict validator rewards each response (rl_rewards); advantages are z-scored within each group, and groups
   that all scored alike are dropped;
3. the kept responses (token ids and commit passes, never re-tokenised text) are gathered from every process and
   dealt out again evenly as TraceRL rows (rl_trace); their log-probs under the step's weights are the rollout
   policy's, and the policy takes as many optimizer steps as the responses fill global batches.

Loss normalisation: each optimizer step's loss is its sum over target tokens divided by a normaliser known before
any forward (see RLConfig.loss_normalization), so gradients are the same on 1 GPU with accumulation as on N without.
Every process runs the same number of forwards (a share that runs short trains on a zero-weighted copy), as FSDP's
collectives need. The run writes the HF checkpoint the server loads and a resumable state every `save_every_steps`
RL steps; a resumed run samples the same rollouts (the sampling seed derives from the run seed, step and process).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .rl_config import RLConfig, RLConfigError, load_rl_config
from .rl_data import RLDataError, RLTask, check_task_files, load_rl_tasks, tasks_from
from .rl_rewards import KernelReward, Reward, RewardError, group_advantages
from .rl_trace import TraceBatch, TraceSample, collate_trace_rows, policy_logprobs, trace_loss, trace_row
from .sft import SFTError, build_model_and_tokenizer, parse_overrides
from .sft_config import SFTConfigError
from .sft_loss import FlexMaskBuilder, dense_layout_mask
from .training_run import (
    CHECKPOINT_DIR, attention_backend, continuation_warmup, keep_steps_up_to, make_accelerator, prepare_run, save_run,
    write_loss_curve,
)

ROLLOUTS_FILE = "rollouts.jsonl"
REWARD_CURVE_FILE = "reward_curve.png"
# What decides which tasks a step takes and what its rollouts sample: a resume with other values is not exact.
SCHEDULE_FIELDS = ("stage", "task_files", "max_prompt_tokens", "tasks_per_step", "group_size", "seed")
# TraceRL rows for flex attention are padded to a multiple of this many tokens (its tile is 128).
FLEX_ROW_MULTIPLE = 512


class RLError(RuntimeError):
    """An RL run that cannot start or continue; the message says what to fix."""


@dataclass
class RLState:
    """Saved with every resumable state: the RL steps done and what each logged."""

    step: int = 0
    # Tasks taken so far (over every pass of the task files): the next step takes the tasks from this one on.
    rows_consumed: int = 0
    # The step at which this run's optimizer was created: 0, or a continuation's start_step.
    optimizer_start_step: int = 0
    history: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)


@dataclass
class RLResult:
    steps: int
    # The metrics of every RL step, resumed ones included (reward_mean, correct_rate, loss, kl, ...).
    history: list[dict]
    checkpoint_dir: Path | None
    # Tasks taken so far: where the next step would read.
    rows_consumed: int = 0
    # Steps the run was to take (rl_steps); `steps` is less when max_minutes stopped it first.
    planned_steps: int = 0


def train_rl(config: RLConfig, reward_fn=None) -> RLResult:
    """Run BiC-RL as configured (in this process; under `accelerate launch` in each of its processes). reward_fn:
    `f(tasks, completions) -> list[Reward]`; by default the strict validator's KernelReward on this process's GPU."""
    check_task_files(config.task_files)
    accelerator = make_accelerator(config)
    model, tokenizer = build_model_and_tokenizer(config)
    tasks, stats = load_rl_tasks(config.task_files, config.stage, tokenizer, config.max_prompt_tokens)
    if accelerator.is_main_process:
        print(f"rl: {config.stage} stage, {stats.kept} tasks ({stats.dropped_too_long} of {stats.records} dropped: "
              f"prompt over {config.max_prompt_tokens} tokens), {config.rl_steps} steps of {config.tasks_per_step} "
              f"tasks x {config.group_size}; model {model.config.num_parameters / 1e6:.1f}M parameters",
              file=sys.stderr)
    held_out = []
    if config.eval_files:
        held_out, _ = load_rl_tasks(config.eval_files, config.stage, tokenizer, config.max_prompt_tokens)
        held_out = held_out[: config.eval_tasks or None]
    own_reward = reward_fn is None
    if own_reward:
        reward_fn = kernel_reward_for(config, accelerator)
    try:
        return run_rl(config, model, tokenizer, tasks, reward_fn, accelerator, held_out)
    finally:
        if own_reward:
            reward_fn.close()
        accelerator.end_training()  # a process group left at exit can abort the process as it ends


def kernel_reward_for(config: RLConfig, accelerator) -> KernelReward:
    """The validator on this process's GPU, compiling on this process's share of the node's CPU cores."""
    from dice_copilot.validator.compile import usable_cpus

    device = accelerator.device
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
    return KernelReward(
        mode=config.reward, speedup_weight=config.speedup_weight,
        gpus=[device.index or 0] if device.type == "cuda" else None,
        compile_timeout_s=config.compile_timeout_s, check_timeout_s=config.check_timeout_s,
        compile_workers=max(1, usable_cpus() // local_processes),
    )


def rollout_seed(run_seed: int, step: int, rank: int) -> int:
    return (run_seed * 0x9E3779B1 + step * 0x85EBCA77 + rank * 0xC2B2AE3D + 1) % (2**63 - 1)


def run_rl(config: RLConfig, model, tokenizer, tasks: list[RLTask], reward_fn, accelerator=None,
           held_out: list[RLTask] = ()) -> RLResult:
    """The RL loop over a built model and loaded tasks (see the module docstring); `held_out` tasks are answered
    greedily every `eval_every_steps` steps and after the last (eval_* metrics of that step)."""
    from dice_copilot.model.engine import BlockDiffusionEngine

    accelerator = accelerator or make_accelerator(config)
    output_dir = Path(config.output_dir)
    device = accelerator.device
    model_config = model.config
    if config.max_prompt_tokens + config.max_new_tokens + model_config.block_size > model_config.max_position_embeddings:
        raise RLError(f"max_prompt_tokens ({config.max_prompt_tokens}) + max_new_tokens ({config.max_new_tokens}) "
                      f"exceeds the model's {model_config.max_position_embeddings} positions; lower one of them")
    if config.start_step > config.rl_steps:
        raise RLError(f"start_step {config.start_step} is past the run's {config.rl_steps} steps; raise rl_steps")

    rollout_dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32, "bfloat16": torch.bfloat16,
                     "float16": torch.float16, "float32": torch.float32}[config.rollout_dtype]
    rollout_model = copy.deepcopy(model).to(device, rollout_dtype).eval().requires_grad_(False)
    engine = BlockDiffusionEngine(rollout_model, tokenizer, device=device)

    config_fields = asdict(config)

    def resume_warning(saved: dict) -> str | None:
        changed = [k for k in SCHEDULE_FIELDS if saved["config"].get(k) != config_fields[k]]
        if not changed:
            return None
        return (f"{', '.join(changed)} changed since the saved state; the run goes on with the new values from step "
                f"{saved['step'] + 1}, which is not an exact resume")

    run = prepare_run(config, model, accelerator, "rl", config.rl_steps, fixed_shapes=False,
                      resume_warning=resume_warning)
    model, optimizer, logger = run.model, run.optimizer, run.logger
    flex = attention_backend(config, device) == "flex"
    build_mask = FlexMaskBuilder().layout_mask if flex else dense_layout_mask
    state = RLState(step=config.start_step, rows_consumed=config.data_offset_rows,
                    optimizer_start_step=config.start_step, config=config_fields)
    if run.saved is not None:
        saved = run.saved
        state = RLState(step=saved["step"], history=saved["history"], config=config_fields,
                        rows_consumed=saved.get("rows_consumed", saved["step"] * saved["config"]["tasks_per_step"]),
                        optimizer_start_step=saved.get("optimizer_start_step", 0))

    if accelerator.is_main_process:
        keep_steps_up_to(output_dir / ROLLOUTS_FILE, state.step)
    run_step = _StepRunner(config, model, optimizer, rollout_model, engine, tokenizer, reward_fn, accelerator,
                           build_mask, FLEX_ROW_MULTIPLE if flex else 1)
    try:
        for step in range(state.step, config.rl_steps):
            for group in optimizer.param_groups:
                group["lr"] = config.learning_rate * continuation_warmup(step, state.optimizer_start_step,
                                                                         config.resume_warmup_steps)
            metrics = run_step(step, tasks_from(tasks, state.rows_consumed, config.tasks_per_step))
            stopping = step + 1 == config.rl_steps or run.past_deadline()
            if held_out and ((step + 1) % config.eval_every_steps == 0 or stopping):
                metrics.update(run_step.evaluate(held_out))
            state.step = step + 1
            state.rows_consumed += config.tasks_per_step
            state.history.append({"step": state.step, **metrics})
            logger.log_step(state.step, {"reward": f"{metrics['reward_mean']:.3f}",
                                         "correct": f"{metrics['correct_rate']:.2f}"}, **metrics)
            periodic = config.save_every_steps and state.step % config.save_every_steps == 0
            if periodic or stopping:
                save_run(accelerator, model, tokenizer, state, config, output_dir)
            if stopping:
                break
    finally:
        logger.close()
    checkpoint = output_dir / CHECKPOINT_DIR
    if accelerator.is_main_process:
        write_loss_curve([[h["step"], h["reward_mean"]] for h in state.history], output_dir / REWARD_CURVE_FILE,
                         label="mean reward", ylabel="mean reward per response", log_scale=False)
    accelerator.wait_for_everyone()
    return RLResult(state.step, state.history, checkpoint if checkpoint.is_dir() else None, state.rows_consumed,
                    config.rl_steps)


@dataclass
class _MicroBatch:
    """One process's share of one micro-step: TraceRL rows (on the CPU), each row's advantage, and its weight
    (0 for a stand-in that keeps the processes' forwards in step)."""

    batch: TraceBatch
    advantages: torch.Tensor
    weight: float


class _StepRunner:
    """One RL step: rollouts, rewards, advantages, old log-probs, optimizer steps; returns the step's metrics."""

    def __init__(self, config: RLConfig, model, optimizer, rollout_model, engine, tokenizer, reward_fn, accelerator,
                 build_mask, row_multiple: int = 1):
        self.config, self.model, self.optimizer = config, model, optimizer
        self.rollout_model, self.engine, self.tokenizer, self.reward_fn = rollout_model, engine, tokenizer, reward_fn
        self.accelerator, self.build_mask, self.row_multiple = accelerator, build_mask, row_multiple
        self.model_config = accelerator.unwrap_model(model).config
        self.world, self.rank = accelerator.num_processes, accelerator.process_index

    def __call__(self, step: int, step_tasks: list[RLTask]) -> dict:
        from dice_copilot.model.decoding import DecodingPolicy

        config, group = self.config, self.config.group_size
        mine = step_tasks[self.rank::self.world]  # whole groups per process: advantages need no exchange
        started = time.perf_counter()
        self._sync_rollout_weights()
        prompts = [self.tokenizer.encode(task.prompt) for task in mine]
        policy = DecodingPolicy(config.strategy, config.threshold, config.temperature, config.top_k, config.top_p,
                                seed=rollout_seed(config.seed, step, self.rank))
        generations = self._rollouts(prompts, policy, group)
        rolled = time.perf_counter()
        group_tasks = [task for task in mine for _ in range(group)]
        rewards = self.reward_fn(group_tasks, [g.text for g in generations]) if generations else []
        rewarded = time.perf_counter()
        advantages = group_advantages([r.value for r in rewards], group)
        samples = []
        for g in range(len(mine)):
            members = range(g * group, (g + 1) * group)
            if any(advantages[i] for i in members):  # a group that all scored alike teaches nothing
                samples += [TraceSample(prompts[g], generations[i].token_ids, generations[i].step_map, advantages[i])
                            for i in members]
        records = [_rollout_record(task, g, r) for task, g, r in zip(group_tasks, generations, rewards)]
        self._write_completions(step, records, generations)
        samples, records = self._gathered(samples, records)
        if all(r["setup_failure"] for r in records):  # all processes see the same gathered records
            raise RLError(f"every verdict of RL step {step + 1} failed outside the kernel, so its rewards say nothing: "
                          f"{records[0]['summary']}; fix the machine before training on these rewards")
        metrics = _rollout_metrics(records, len(samples), group)
        metrics.update(self._train(samples))
        metrics.update(rollout_s=rolled - started, reward_s=rewarded - rolled, train_s=time.perf_counter() - rewarded)
        return metrics

    def evaluate(self, held_out: list[RLTask]) -> dict:
        """One greedy answer to each held-out task (this process's share) under the current weights, rewarded
        like the rollouts: the eval_* metrics."""
        from dice_copilot.model.decoding import DecodingPolicy

        mine = held_out[self.rank::self.world]
        self._sync_rollout_weights()
        policy = DecodingPolicy(self.config.strategy, self.config.threshold)  # temperature 0: greedy
        generations = self._rollouts([self.tokenizer.encode(task.prompt) for task in mine], policy, 1)
        rewards = self.reward_fn(mine, [g.text for g in generations]) if generations else []
        [records] = self._gathered([_rollout_record(task, g, r) for task, g, r in zip(mine, generations, rewards)])
        metrics = _rollout_metrics(records, 0, 1)
        return {f"eval_{name}": metrics[name] for name in ("reward_mean", "correct_rate", "compile_rate",
                                                              "completion_tokens", "stop_rate", "tokens_per_forward")}

    def _gathered(self, *lists: list) -> tuple[list, ...]:
        """Each list concatenated over the processes, in process order (as is, on one process)."""
        if self.world == 1:
            return lists
        from accelerate.utils import gather_object

        return tuple(gather_object(items) for items in lists)

    def _sync_rollout_weights(self) -> None:
        """The rollout copy takes the policy's current weights, in place (the engine's fused views and captured
        graphs point at them); sharded (FSDP2) tensors are gathered whole first."""
        state = self.accelerator.unwrap_model(self.model).state_dict()
        full = {name: t.full_tensor() if hasattr(t, "full_tensor") else t for name, t in state.items()}
        self.rollout_model.load_state_dict(full)
        if self.engine.device.type == "cuda":
            torch.cuda.synchronize(self.engine.device)

    def _rollouts(self, prompts: list[list[int]], policy, copies: int) -> list:
        """`copies` responses per prompt (prompt-major) decoded with `policy` (a DecodingPolicy) through a
        ContinuousBatcher sized to the free memory; the cache is released afterwards for the optimizer steps."""
        from dice_copilot.model.engine import ContinuousBatcher
        from dice_copilot.model.memory_plan import positions_needed

        if not prompts:
            return []
        config = self.config
        longest = positions_needed(max(map(len, prompts)), config.max_new_tokens, self.model_config.block_size)
        rows = [p for p in prompts for _ in range(copies)]
        results = [None] * len(rows)
        with ContinuousBatcher(self.engine, max_length=longest, policy=policy) as batcher:
            index = {batcher.submit(row, config.max_new_tokens, self.tokenizer.stop_token_ids): i
                     for i, row in enumerate(rows)}
            for request_id, generation in batcher.run():
                results[index[request_id]] = generation
        self.engine.release_cache()
        if self.engine.device.type == "cuda":
            torch.cuda.empty_cache()
        return results

    def _write_completions(self, step: int, records: list[dict], generations: list) -> None:
        """The main process's first responses of the step, with their text, to rollouts.jsonl."""
        if not self.accelerator.is_main_process or not self.config.log_completions:
            return
        output_dir = Path(self.config.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        with (output_dir / ROLLOUTS_FILE).open("a", encoding="utf-8") as handle:
            for record, generation in list(zip(records, generations))[: self.config.log_completions]:
                handle.write(json.dumps({"step": step + 1, **record, "text": generation.text}, ensure_ascii=False)
                             + "\n")

    def _train(self, samples: list[TraceSample]) -> dict:
        """Optimizer steps over the kept responses of every process, a global batch each; this process takes every
        world-th response of each."""
        config, accelerator, model = self.config, self.accelerator, self.model
        global_batch = config.per_device_batch_size * config.grad_accum * self.world
        plan = [self._micro_batches(samples[s:s + global_batch], samples) for s in range(0, len(samples), global_batch)]
        with torch.no_grad():
            old = [[self._logprobs(m.batch) for m in micro] for micro, _ in plan]  # the rollout policy's

        totals = torch.zeros(5, device=accelerator.device, dtype=torch.float64)  # loss, pg, kl, clipped, tokens
        grad_norms = []
        for (micro, normaliser), old_logps in zip(plan, old):
            for index, (m, logp_old) in enumerate(zip(micro, old_logps)):
                last = index == len(micro) - 1
                with contextlib.nullcontext() if last else accelerator.no_sync(model):
                    rows = m.batch.target_rows.to(accelerator.device)
                    terms = trace_loss(self._logprobs(m.batch), logp_old, m.advantages.to(accelerator.device)[rows],
                                       config.clip_epsilon, config.kl_beta)
                    accelerator.backward(terms.loss * (m.weight * self.world / normaliser))
                totals += m.weight * torch.stack([
                    terms.loss.detach().double() / normaliser, terms.policy_gradient.double(), terms.kl.double(),
                    terms.clipped.double(), torch.tensor(float(terms.tokens), device=totals.device).double()])
            if config.max_grad_norm > 0:
                grad_norms.append(float(accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        loss, pg, kl, clipped, tokens = accelerator.reduce(totals, reduction="sum").tolist()
        per_token = (lambda v: v / tokens) if tokens else (lambda v: 0.0)
        return {
            "optimizer_steps": len(plan), "loss": loss / len(plan) if plan else 0.0,
            "policy_gradient": per_token(pg), "kl": per_token(kl), "clip_fraction": per_token(clipped),
            "trained_tokens": int(tokens), "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else None,
        }

    def _micro_batches(self, chunk: list[TraceSample], every: list[TraceSample]) -> tuple[list[_MicroBatch], float]:
        """This process's grad_accum micro-batches of one global batch, and the batch's loss normaliser."""
        config = self.config
        mine, size = chunk[self.rank::self.world], config.per_device_batch_size
        micro = []
        for m in range(config.grad_accum):
            part = mine[m * size:(m + 1) * size]
            stand_in = [mine[0] if mine else every[0]]
            micro.append(_MicroBatch(self._rows(part or stand_in), torch.tensor([s.advantage for s in part or stand_in]),
                                     1.0 if part else 0.0))
        if config.loss_normalization == "tokens":
            return micro, float(sum(len(s.response_ids) for s in chunk))
        return micro, float(len(chunk) * config.max_new_tokens)

    def _rows(self, samples: list[TraceSample]) -> TraceBatch:
        c = self.model_config
        rows = [trace_row(s, c.block_size, c.mask_token_id, c.pad_token_id) for s in samples]
        return collate_trace_rows(rows, c.pad_token_id, self.row_multiple)

    def _logprobs(self, batch: TraceBatch) -> torch.Tensor:
        batch = batch.to(self.accelerator.device)
        with self.accelerator.autocast():
            return policy_logprobs(self.model, batch, self.build_mask(*batch.layout), self.config.temperature,
                                   self.model_config.mask_token_id)


def _rollout_record(task: RLTask, generation, reward: Reward) -> dict:
    """What the metrics and rollouts.jsonl keep of one response (no text: these are gathered from every process)."""
    return {"task": task.id, "reward": reward.value, "compiled": reward.compiled, "correct": reward.correct,
            "speedup": reward.speedup, "setup_failure": reward.setup_failure, "summary": reward.summary,
            "finish_reason": generation.finish_reason, "tokens": generation.stats.generated_tokens,
            "tokens_per_forward": generation.stats.tokens_per_forward}


def _rollout_metrics(records: list[dict], trained: int, group_size: int) -> dict:
    """The step's health: reward and its spread, how many kernels compiled and were correct, how much was kept."""
    n = len(records)  # every step has tasks, so every step has responses
    values = [r["reward"] for r in records]
    mean = sum(values) / n
    return {
        "reward_mean": mean, "reward_std": math.sqrt(sum((v - mean) ** 2 for v in values) / n),
        "correct_rate": sum(r["correct"] for r in records) / n, "compile_rate": sum(r["compiled"] for r in records) / n,
        "setup_failures": sum(r["setup_failure"] for r in records), "responses": n,
        "groups_kept": trained / group_size, "groups": n / group_size, "responses_trained": trained,
        "completion_tokens": sum(r["tokens"] for r in records) / n,
        "stop_rate": sum(r["finish_reason"] == "stop" for r in records) / n,
        "tokens_per_forward": sum(r["tokens_per_forward"] for r in records) / n,
    }


# --- command line -----------------------------------------------------------------------------------------------


def run_train_rl(args) -> int:
    """`dice-copilot train rl` (declared in trainer/commands.py)."""
    try:
        config = load_rl_config(args.config, **parse_overrides(args.set))
        result = train_rl(config)
    except (RLConfigError, SFTConfigError, RLDataError, RLError, RewardError, SFTError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    last = result.history[-1] if result.history else {}
    print(f"rl: {result.steps} steps, mean reward {last.get('reward_mean', float('nan')):.3f}, correct rate "
          f"{last.get('correct_rate', float('nan')):.2f}; checkpoint {result.checkpoint_dir}")
    return 0
