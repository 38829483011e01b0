"""RLConfig: every knob of BiC-RL (TraceRL on execution rewards) in one dataclass, overridable from a TOML or YAML file.

Defaults follow DICE's released RL configs (docs/decoding.md#rl-recipe): 64 tasks a step, groups of 16, dynamic
decoding at τ = 0.9 with temperature 1, a binary compiles-and-correct reward z-scored within each group, PPO clip
0.2, k3-KL to the rollout policy with β = 0.01, AdamW at lr 1e-6, gradient clip 1. The two stages differ only in
`stage`, `task_files`, `rl_steps` and `max_prompt_tokens` (see trainer/rl_configs/). The fields every training run
has (model, optimisation, speed, output) are TrainingConfig's; this file adds RL's and gives the shared ones their RL
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dice_copilot.model.decoding import STRATEGIES
from dice_copilot.validator.api import Budget

from .training_config import TrainingConfig

STAGES = ("infill", "e2e")
REWARDS = ("correct", "compiles")
LOSS_NORMALIZATIONS = ("constant", "tokens")
ROLLOUT_DTYPES = ("auto", "bfloat16", "float16", "float32")


class RLConfigError(ValueError):
    """A bad RL config value or file; the message names the field and what to do."""


@dataclass(kw_only=True)
class RLConfig(TrainingConfig):
    """BiC-RL settings (with TrainingConfig's)."""

    kind = "RL"
    error = RLConfigError
    path_list_fields = ("task_files", "eval_files")

    # --- model -------------------------------------------------------------------------------------------
    # The policy to start from: a checkpoint folder (an SFT run's `checkpoint/`, or stage 1's for stage 2), or a
    # size preset (from scratch: only for tests and plumbing runs). RL trains the blocks the engine decodes, so only
    # a preset takes another `block_size`.
    model: str = "runs/sft/checkpoint"

    # --- tasks -------------------------------------------------------------------------------------------
    # "infill" (stage 1: write the CUDA source inside a fixed ModelNew skeleton) or "e2e" (stage 2: the whole
    # ModelNew from the PyTorch module).
    stage: str = "e2e"
    # JSONL task files, read in order (CuKe's `infill_tasks.jsonl` / `e2e_tasks.jsonl` are written easy -> hard).
    # Each line needs `pytorch_code`; infill tasks also `prefix` and `suffix`.
    task_files: list[str] = field(default_factory=list)
    # Tasks whose prompt is longer are dropped when the files are read, before any rollout, so rewards can never
    # shift onto other tasks' responses (docs/decoding.md#differences-from-the-released-code).
    max_prompt_tokens: int = 1500
    # RL steps (rollout -> reward -> update). Step s takes tasks [s*T, (s+1)*T) of the file order, modulo the
    # number of tasks: easy -> hard, as DICE's sequential_select. (A step reads on from the tasks taken so far, so a
    # continuation that changes tasks_per_step still skips and repeats none.)
    rl_steps: int = 100
    tasks_per_step: int = 64
    # Responses sampled per task; advantages are z-scored within each group.
    group_size: int = 16
    # Held-out tasks (CuKe's `eval_heldout.jsonl`: families and compositions no training pair has), answered once each
    # with greedy decoding every `eval_every_steps` RL steps and after the last, for the reward and correct rate the
    # policy reaches on work it was not trained on. Never KernelBench (held out for the final evaluation; DICE's
    # released RL used its level 1 here). Empty: no evaluation.
    eval_files: list[str] = field(default_factory=list)
    eval_every_steps: int = 10
    # The first N held-out tasks (0: all).
    eval_tasks: int = 64

    # --- rollouts (the BlockDiffusionEngine) ---------------------------------------------------------------
    max_new_tokens: int = 4096
    strategy: str = "dynamic"
    threshold: float = 0.9
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    # Weights of the rollout copy of the policy: "auto" is bfloat16 on a GPU, float32 on a CPU.
    rollout_dtype: str = "auto"

    # --- reward (the validator, strict policy) ---------------------------------------------------------------
    # "correct": 1 when the kernel compiles, passes the strict static checks and matches the PyTorch reference on
    # the GPU (DICE's binary reward); needs a CUDA device. "compiles": 1 when it passes the static checks and
    # compiles — for plumbing runs on machines without a GPU only: it rewards kernels that may be wrong.
    reward: str = "correct"
    # Adds weight * clip(ln(speedup), -1, ln 10) to a correct kernel's reward (timing on, slower verdicts).
    # DICE: 0 (binary reward). The cap stops the policy chasing the 10x region where timing hacks live.
    speedup_weight: float = 0.0
    # Per-build and per-check limits of a verdict, in seconds (the validator's own defaults).
    compile_timeout_s: float = Budget.compile_timeout_s
    check_timeout_s: float = Budget.call_timeout_s

    # --- objective (TraceRL, docs/decoding.md#tracerl-loss) ---------------------------------------------------
    clip_epsilon: float = 0.2
    # Weight of the k3 estimate of KL(policy || rollout policy) on each target token.
    kl_beta: float = 0.01
    # "constant": a step's loss is divided by (responses in its global batch x max_new_tokens), so every token
    # weighs the same whatever the response length (TraceRL divides by the batch's longest response);
    # "tokens": divided by the number of target tokens in the global batch.
    loss_normalization: str = "constant"

    # --- optimisation ------------------------------------------------------------------------------------
    # A row is one response holding all its trace rounds. An RL step runs as many optimizer steps as its kept
    # responses fill (per_device_batch_size * grad_accum * processes each; the last one may be partial).
    grad_accum: int = 16
    learning_rate: float = 1e-6
    # Seeds the rollouts' sampling (with the step and process) and weight init for presets.
    seed: int = 10086

    # --- speed -------------------------------------------------------------------------------------------
    gradient_checkpointing: bool = True

    # --- output ------------------------------------------------------------------------------------------
    # Also `rollouts.jsonl` and `reward_curve.png`. Steps (saving, logging) are RL steps.
    output_dir: str = "runs/rl"
    save_every_steps: int = 1
    # Responses of each step written with their text and verdict to rollouts.jsonl (the first ones of the step).
    log_completions: int = 8
    log_every_steps: int = 1

    @property
    def responses_per_step(self) -> int:
        return self.tasks_per_step * self.group_size

    def own_field_checks(self) -> list[tuple[str, bool, str]]:
        return [
            ("stage", self.stage in STAGES, f"must be one of {STAGES}"),
            ("max_prompt_tokens", self.max_prompt_tokens >= 1, "must be >= 1"),
            ("rl_steps", self.rl_steps >= 1, "must be >= 1"),
            ("tasks_per_step", self.tasks_per_step >= 1, "must be >= 1"),
            ("group_size", self.group_size >= 2, "must be >= 2 (advantages compare the responses of a group)"),
            ("eval_every_steps", self.eval_every_steps >= 1, "must be >= 1"),
            ("eval_tasks", self.eval_tasks >= 0, "must be >= 0"),
            ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
            ("strategy", self.strategy in STRATEGIES, f"must be one of {STRATEGIES}"),
            ("threshold", 0 <= self.threshold <= 1, "must be in [0, 1]"),
            ("temperature", self.temperature > 0, "must be > 0 (the policy's log-probs are those it samples from)"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("rollout_dtype", self.rollout_dtype in ROLLOUT_DTYPES, f"must be one of {ROLLOUT_DTYPES}"),
            ("reward", self.reward in REWARDS, f"must be one of {REWARDS}"),
            ("speedup_weight", self.speedup_weight >= 0, "must be >= 0"),
            ("speedup_weight", self.speedup_weight == 0 or self.reward == "correct",
             "needs reward = 'correct' (speed is only measured on the GPU)"),
            ("compile_timeout_s", self.compile_timeout_s > 0, "must be > 0"),
            ("check_timeout_s", self.check_timeout_s > 0, "must be > 0"),
            ("clip_epsilon", 0 < self.clip_epsilon < 1, "must be in (0, 1)"),
            ("kl_beta", self.kl_beta >= 0, "must be >= 0"),
            ("loss_normalization", self.loss_normalization in LOSS_NORMALIZATIONS,
             f"must be one of {LOSS_NORMALIZATIONS}"),
            ("log_completions", self.log_completions >= 0, "must be >= 0"),
        ]


load_rl_config = RLConfig.load
