"""Fixtures for the RL tests: short tasks, a reward a tiny random policy can learn, a CPU-sized config, and a
hand-written load_inline kernel (reference, skeleton, answer) for the reward tests."""

import textwrap
from pathlib import Path

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
