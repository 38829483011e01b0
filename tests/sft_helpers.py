"""Small fixtures for the SFT tests: hand-written CUDA kernels, a tokenizer trained on them, JSONL data, configs."""

import json
from pathlib import Path

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
