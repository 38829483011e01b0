"""BiC-RL on CUDA GPUs: the correct reward from the validator's GPU stage, a run through the GPU paths (bf16 rollout
copy in the engine with CUDA graphs, flex-attention TraceRL rows, compiled layers), and FSDP2 on two GPUs."""

import pytest
import torch
from rl_helpers import CANDIDATE, E2E, answer, run_on_two_processes, short_tasks, starts_with_a_space, tiny_rl_config
from sft_helpers import FSDP2_TWO_GPUS, make_tokenizer

from dice_copilot.trainer.rl import run_rl
from dice_copilot.trainer.rl_rewards import KernelReward
from dice_copilot.trainer.sft import build_model_and_tokenizer

pytestmark = pytest.mark.gpu


def test_the_correct_reward_runs_the_kernel_against_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("DICE_COPILOT_CACHE", str(tmp_path / "cache"))
    reward = KernelReward(mode="correct", gpus=[0])
    try:
        wrong = CANDIDATE.replace("x[i] + 1.0f", "x[i] + 2.0f")
        right, off = reward([E2E, E2E], [answer(CANDIDATE), answer(wrong)])
    finally:
        reward.close()
    assert right.value == 1.0 and right.correct, right.summary
    assert off.value == 0.0 and off.compiled and not off.correct, off.summary


def test_a_run_on_the_gpu_learns_the_reward(tmp_path):
    config = tiny_rl_config(tmp_path, make_tokenizer(tmp_path / "tok"), rl_steps=25, kl_beta=0.01,
                            mixed_precision="bf16", gradient_checkpointing=True)
    model, tokenizer = build_model_and_tokenizer(config)
    result = run_rl(config, model, tokenizer, short_tasks(), starts_with_a_space)
    rewards = [h["reward_mean"] for h in result.history]
    assert torch.cuda.is_available()
    assert sum(rewards[-5:]) / 5 > 0.8, rewards


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_fsdp2_on_two_gpus_gathers_the_shards_for_the_rollouts_and_trains(tmp_path):
    accelerate_config = tmp_path / "fsdp2.yaml"
    accelerate_config.write_text(FSDP2_TWO_GPUS)
    runs = run_on_two_processes(tmp_path, make_tokenizer(tmp_path / "tok"),
                                ["accelerate.commands.launch", "--config_file", str(accelerate_config)])
    assert [run["distributed_type"] for run in runs] == ["FSDP"] * 2
