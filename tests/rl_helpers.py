"""Fixtures for the RL tests: short tasks, a reward a tiny random policy can learn, a CPU-sized config, and a
hand-written load_inline kernel (reference, skeleton, answer) for the reward tests."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dice_copilot.model import load
from dice_copilot.trainer.rl_config import RLConfig
from dice_copilot.trainer.rl_data import RLTask
from dice_copilot.trainer.rl_rewards import Reward

MODULE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def short_tasks() -> list[RLTask]:
    """Tasks with short chat prompts (DICE's one-shot prompts are thousands of tokens: too long for CPU tests)."""
    return [RLTask(f"t{i}", MODULE, f"<|im_start|>user\nWrite the CUDA {op} kernel.<|im_end|>\n<|im_start|>assistant\n")
            for i, op in enumerate(["relu", "square", "negate", "scale"])]


def starts_with_a_space(tasks, completions):
    """A reward a random tiny policy earns ~15% of the time: the answer's first character is a space."""
    return [Reward(float(text[:1] == " ")) for text in completions]


def tiny_rl_config(tmp_path: Path, tokenizer_dir: Path, **overrides) -> RLConfig:
    values = dict(
        model="tiny", tokenizer=str(tokenizer_dir), task_files=["unused"], rl_steps=4, tasks_per_step=4, group_size=8,
        max_new_tokens=8, max_prompt_tokens=100, learning_rate=2e-2, per_device_batch_size=2, grad_accum=4,
        kl_beta=0.0, mixed_precision="no", gradient_checkpointing=False, save_every_steps=0, save_dtype="float32",
        output_dir=str(tmp_path / "run"), tensorboard=False, progress_bar=False, seed=0,
    )
    values.update(overrides)
    return RLConfig(**values)


REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return x + 1.0

    def get_inputs():
        return [torch.randn(4096)]

    def get_init_inputs():
        return []
''')

PREFIX = "import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
MIDDLE = textwrap.dedent('''
    add_one_source = """
    __global__ void add_one_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] + 1.0f;
    }

    torch::Tensor add_one(torch::Tensor x) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
    """
''').lstrip("\n")
SUFFIX = textwrap.dedent('''
    add_one_cpp = "torch::Tensor add_one(torch::Tensor x);"
    ext = load_inline(name="add_one", cpp_sources=add_one_cpp, cuda_sources=add_one_source, functions=["add_one"])


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return ext.add_one(x)
''')
CANDIDATE = PREFIX + MIDDLE + SUFFIX


def answer(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


E2E = RLTask("add_one", REFERENCE, "prompt")
INFILL = RLTask("add_one", REFERENCE, "prompt", prefix=PREFIX, suffix=SUFFIX)


# A 3-step RL run of tiny_rl_config in each of several processes; each writes its metrics and how accelerate ran.
TWO_PROCESS_RUN = """
import json, os, sys
from pathlib import Path

import torch
from accelerate import PartialState
from rl_helpers import short_tasks, starts_with_a_space, tiny_rl_config

from dice_copilot.trainer.rl import run_rl
from dice_copilot.trainer.sft import build_model_and_tokenizer

torch.set_num_threads(1)
out, tokenizer_dir = Path(sys.argv[1]), Path(sys.argv[2])
config = tiny_rl_config(out, tokenizer_dir, rl_steps=3, group_size=4, per_device_batch_size=2, grad_accum=2,
                        kl_beta=0.01, save_every_steps=3)
model, tokenizer = build_model_and_tokenizer(config)
result = run_rl(config, model, tokenizer, short_tasks(), starts_with_a_space)
(out / f"run-{os.environ['RANK']}.json").write_text(json.dumps(
    {"history": result.history, "distributed_type": PartialState().distributed_type.name}))
# Both processes leave together: a gloo process whose peer has already gone can abort as it exits.
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""
# Metrics that are wall-clock times, so differ between runs that are otherwise the same.
TIMINGS = ("rollout_s", "reward_s", "train_s")


def run_on_two_processes(tmp_path: Path, tokenizer_dir: Path, launcher: list[str]) -> list[dict]:
    """TWO_PROCESS_RUN under `launcher` (python -m LAUNCHER script ...): both processes' records, checked to agree."""
    script = tmp_path / "two.py"
    script.write_text(TWO_PROCESS_RUN)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run([sys.executable, "-m", *launcher, str(script), str(tmp_path), str(tokenizer_dir)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [json.loads((tmp_path / f"run-{rank}.json").read_text()) for rank in (0, 1)]
    untimed = [[{k: v for k, v in h.items() if k not in TIMINGS} for h in run["history"]] for run in runs]
    assert untimed[0] == untimed[1]
    assert [h["responses"] for h in runs[0]["history"]] == [16, 16, 16]
    assert any(h["optimizer_steps"] for h in runs[0]["history"])
    model, _ = load(tmp_path / "run" / "checkpoint")
    assert model.config.block_size == 4
    return runs
