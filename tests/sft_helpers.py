"""Small fixtures for the SFT tests: hand-written CUDA kernels, a tokenizer trained on them, JSONL data, configs, and
the check that a 2-process run trains as 1 process does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dice_copilot.model import load
from dice_copilot.trainer.sft import train_sft
from dice_copilot.trainer.sft_config import SFTConfig
from dice_copilot.trainer.tokenizer_training import train_tokenizer

# Elementwise kernels written for these tests (one per op), in the shape a completion takes.
OPS = {
    "relu": "fmaxf(x[i], 0.0f)",
    "square": "x[i] * x[i]",
    "negate": "-x[i]",
    "scale": "2.5f * x[i]",
    "sigmoid": "1.0f / (1.0f + expf(-x[i]))",
    "softplus": "log1pf(expf(x[i]))",
}


def kernel_source(name: str) -> str:
    return (
        f"__global__ void {name}_kernel(const float* x, float* y, int n) {{\n"
        f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) y[i] = {OPS[name]};\n"
        f"}}\n"
    )


def prompt_for(name: str) -> str:
    return f"<|im_start|>user\nWrite the CUDA {name} kernel.<|im_end|>\n<|im_start|>assistant\n"


def records(names=None) -> list[dict]:
    return [{"prompt": prompt_for(n), "response": kernel_source(n)} for n in (names or OPS)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_tokenizer(folder: Path, vocab_size: int = 500) -> Path:
    corpus = [r["prompt"] + r["response"] for r in records()]
    return train_tokenizer(corpus * 4, vocab_size, folder, min_frequency=2)


def tiny_sft_config(tmp_path: Path, train_file: Path, tokenizer_dir: Path, **overrides) -> SFTConfig:
    """A CPU-sized run: the "tiny" preset, short rows, no progress bar."""
    values = dict(
        model="tiny", tokenizer=str(tokenizer_dir), train_files=[str(train_file)], seq_len=96,
        per_device_batch_size=4, max_steps=10, learning_rate=3e-3, warmup_steps=2, save_every_steps=0,
        log_every_steps=5, save_dtype="float32", output_dir=str(tmp_path / "run"), progress_bar=False,
        tensorboard=False, mixed_precision="no", seed=0,
    )
    values.update(overrides)
    return SFTConfig(**values)


# The FSDP2 setup of trainer/accelerate_configs on two GPUs (accelerate shards only on GPUs: with use_cpu it runs DDP).
FSDP2_TWO_GPUS = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
mixed_precision: 'no'
num_machines: 1
num_processes: 2
machine_rank: 0
rdzv_backend: static
same_network: true
use_cpu: false
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: DecoderLayer
  fsdp_reshard_after_forward: true
  fsdp_offload_params: false
  fsdp_cpu_ram_efficient_loading: false
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_activation_checkpointing: false
"""


def parameters_of(checkpoint_dir):
    model, _ = load(checkpoint_dir, dtype=torch.float32)
    return model.state_dict()


def assert_two_processes_match_one(tmp_path, tokenizer_dir, kernels_file, launcher: list[str]):
    """Train 4 steps with 2 processes started by `launcher` (no accumulation) and with 1 process (grad_accum 2): same
    rows, same noise, same loss normalisation, so the same losses and weights up to float summation order. Returns
    the 2-process run's folder."""
    settings = dict(max_steps=4, per_device_batch_size=2, packing=False)
    single = train_sft(tiny_sft_config(tmp_path / "one", kernels_file, tokenizer_dir, grad_accum=2, **settings))
    config_file = tmp_path / "two.toml"
    two_dir = tmp_path / "two" / "run"
    config_file.write_text("\n".join([
        'model = "tiny"', f'tokenizer = "{tokenizer_dir}"', f'train_files = ["{kernels_file}"]', "seq_len = 96",
        "per_device_batch_size = 2", "grad_accum = 1", "max_steps = 4", "packing = false", "learning_rate = 3e-3",
        "warmup_steps = 2", 'save_dtype = "float32"', f'output_dir = "{two_dir}"', "progress_bar = false",
        "tensorboard = false", 'mixed_precision = "no"', "seed = 0", "log_every_steps = 1",
    ]) + "\n")
    launched = subprocess.run(
        [sys.executable, "-m", *launcher, "-m", "dice_copilot.cli", "train", "sft", str(config_file)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    losses = [json.loads(line)["loss"] for line in (two_dir / "metrics.jsonl").read_text().splitlines()]
    assert losses == pytest.approx([loss for _, loss in single.losses], rel=1e-4)
    expected, actual = parameters_of(single.checkpoint_dir), parameters_of(two_dir / "checkpoint")
    assert expected.keys() == actual.keys()
    assert all(torch.allclose(expected[n], actual[n], atol=1e-5) for n in expected)
    return two_dir
