"""bench/model_eval.py (held-out scores through the real engine and the strict validator, in compile-only mode on this
CPU machine) and the decoding defaults a checkpoint carries in generation_config.json."""

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from checkpoint_helpers import UNTRAINED_CHECKPOINT
from rl_helpers import CANDIDATE, REFERENCE

from dice_copilot.cli import main
from dice_copilot.model.checkpoint import (CHECKPOINT_ENV, CheckpointError, read_decoding_defaults,
                                           write_decoding_defaults)
from dice_copilot.validator import Budget, ValidatorPool

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "model_eval.py"

# A second problem written for these tests: a row-wise scale, with a solution of two kernels.
SCALE_REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 3.0 - 1.0

    def get_inputs():
        return [torch.randn(64, 128)]

    def get_init_inputs():
        return []
''')
SCALE_SOLUTION = textwrap.dedent('''
    import torch
    from torch.utils.cpp_extension import load_inline

    source = """
    __global__ void triple_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 3.0f * x[i];
    }

    __global__ void minus_one_kernel(float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] -= 1.0f;
    }

    torch::Tensor scale(torch::Tensor x) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        triple_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        minus_one_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
        return y;
    }
    """

    ext = load_inline(name="scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x);", cuda_sources=source,
                      functions=["scale"])


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return ext.scale(x)
''')


def load_bench():
    spec = importlib.util.spec_from_file_location("model_eval", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def user_problems(folder: Path) -> Path:
    for name, reference, solution in (("add_one", REFERENCE, CANDIDATE), ("scale", SCALE_REFERENCE, SCALE_SOLUTION)):
        (folder / name).mkdir(parents=True)
        (folder / name / "problem.py").write_text(reference)
        (folder / name / "solution.py").write_text(solution)
    return folder


def test_the_eval_scores_the_embedded_default_beside_a_baseline_in_compile_only_mode(tmp_path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(UNTRAINED_CHECKPOINT, checkpoint)
    out = tmp_path / "eval.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--checkpoint", str(checkpoint), "--user-problems",
         str(user_problems(tmp_path / "problems")), "--candidates", "2", "--max-new-tokens", "8",
         "--strategy", "static", "--write-defaults", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/local/bin:/usr/bin:/bin", CHECKPOINT_ENV: str(UNTRAINED_CHECKPOINT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile-only mode: no CUDA device" in done.stderr and "compile-only mode" in done.stdout
    report = json.loads(out.read_text())
    assert report["mode"] == "compile-only"
    # add_one's solution has one kernel, scale's two: three infill requests.
    assert report["sets"] == {"user_style": {"problems": 2, "infill_requests": 3}}
    assert list(report["columns"]) == ["ours", "baseline"]
    for column in report["columns"].values():
        scores = column["scores"]["user_style"]
        assert scores["correct_rate"] is None and scores["fast_1"] is None
        assert all(0 <= scores[k] <= 1 for k in ("compile_rate", "best_of_n", "infill_validated"))
        assert 0 < scores["infill_p50_s"] <= scores["infill_p95_s"]
        assert column["untrained"]
    # A flag decodes both columns alike; what no flag sets comes from each checkpoint (here neither has defaults).
    assert [c["decoding"]["strategy"] for c in report["columns"].values()] == ["static", "static"]
    assert "| user_style | compile_rate |" in done.stdout and "not measured" in done.stdout
    assert read_decoding_defaults(checkpoint) == {"strategy": "static", "threshold": 0.9, "temperature": 0.7,
                                                  "num_return_sequences": 2, "max_new_tokens": 8}


class Scripted:
    """A stand-in model: answers add_one with its honest solution (end to end and infill), scale with prose."""

    def __init__(self, module, candidates: int):
        self.decoding = module.Decoding("dynamic", 0.9, 4, None, 0.7, candidates, 64, 0)
        self.prompts = []

    def __call__(self, prompts, n, sample):
        from dice_copilot.model.engine import Generation, GenerationStats

        self.prompts += prompts
        stats = GenerationStats(forward_passes=4, tokens_per_forward=2.0, wall_time_s=0.01, prompt_tokens=9,
                                generated_tokens=8)
        text = lambda prompt: f"```python\n{CANDIDATE}```" if "x + 1.0" in prompt else "no idea"  # noqa: E731
        return [[Generation([], text(p), [], stats, "stop") for _ in range(n)] for p in prompts]


def test_scores_count_what_the_validator_passes(tmp_path):
    module = load_bench()
    problems = module.user_problems(user_problems(tmp_path / "problems"))
    evaluated = module.EvalSet("user_style", problems, [r for p in problems for r in module.infill_requests(p)])
    assert [(r.problem.name, r.kernel) for r in evaluated.requests] == [
        ("add_one", "add_one_kernel"), ("scale", "triple_kernel"), ("scale", "minus_one_kernel")]
    generate = Scripted(module, candidates=2)
    with ValidatorPool() as pool:
        answers = []
        scores = module.score_set(evaluated, generate, pool, Budget(timing=False), compile_only=not pool.has_gpu,
                                  answers=answers)
    assert scores["compile_rate"] == 0.5 and scores["best_of_n"] == 0.5
    # What --dump writes: each greedy answer with its verdict.
    assert [(a["problem"], a["compiled"], a["answer"] == "no idea") for a in answers] == [
        ("add_one", True, False), ("scale", False, True)]
    assert "no code in the answer" in answers[1]["verdict"]
    # add_one's infill answer is its whole solution: spliced into the blanked body, it compiles; scale's prose does
    # not fill a hole.
    assert scores["infill_validated"] == pytest.approx(1 / 3)
    assert scores["tokens_per_forward"] == 2.0
    # Greedy prompts, best-of-N prompts, then one prompt per infill request.
    assert len(generate.prompts) == 2 + 2 + 3


def test_percentiles_interpolate_between_ranks():
    module = load_bench()
    assert module._percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert module._percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert module._percentile([7.0], 95) == 7.0


def test_decoding_defaults_round_trip_and_bad_values_name_the_file(tmp_path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(UNTRAINED_CHECKPOINT, checkpoint)
    assert read_decoding_defaults(checkpoint) == {}
    write_decoding_defaults(checkpoint, {"strategy": "sequential", "threshold": 1, "num_return_sequences": 8})
    written = json.loads((checkpoint / "generation_config.json").read_text())
    assert written["block_size"] == 4 and written["mask_token_id"] == 3  # the token ids and block size are kept
    assert read_decoding_defaults(checkpoint) == {"strategy": "sequential", "threshold": 1.0,
                                                  "num_return_sequences": 8}
    write_decoding_defaults(checkpoint, {"threshold": None})
    assert "threshold" not in read_decoding_defaults(checkpoint)
    with pytest.raises(CheckpointError, match="threshold = 1.5 must be a float in"):
        write_decoding_defaults(checkpoint, {"threshold": 1.5})
    (checkpoint / "generation_config.json").write_text(json.dumps({**written, "strategy": "beam"}))
    with pytest.raises(CheckpointError, match="generation_config.json: strategy = 'beam' must be a str one of"):
        read_decoding_defaults(checkpoint)


def test_generate_decodes_with_the_checkpoint_defaults_unless_told_otherwise(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(UNTRAINED_CHECKPOINT, checkpoint)
    write_decoding_defaults(checkpoint, {"strategy": "static", "threshold": 0.5})
    command = ["generate", "--prompt", "hello", "--checkpoint", str(checkpoint), "--max-new-tokens", "4", "--json"]
    assert main(command) == 0
    chosen = json.loads(capsys.readouterr().out)["decoding"]
    assert (chosen["strategy"], chosen["threshold"]) == ({"value": "static", "source": "checkpoint"},
                                                         {"value": 0.5, "source": "checkpoint"})
    assert main(command + ["--strategy", "dynamic"]) == 0
    chosen = json.loads(capsys.readouterr().out)["decoding"]
    assert (chosen["strategy"]["value"], chosen["threshold"]["value"]) == ("dynamic", 0.5)


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_on_a_gpu_the_eval_runs_the_kernels_and_scores_correctness(tmp_path):
    out = tmp_path / "eval.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--checkpoint", "default", "--no-baseline", "--user-problems",
         str(user_problems(tmp_path / "problems")), "--candidates", "2", "--max-new-tokens", "16", "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "full" and "compile-only" not in done.stdout
    scores = report["columns"]["ours"]["scores"]["user_style"]
    assert 0 <= scores["correct_rate"] <= scores["compile_rate"] and 0 <= scores["fast_1"] <= scores["correct_rate"]


@pytest.mark.gpu
def test_scores_on_a_gpu_count_correct_kernels(tmp_path):
    """On a GPU the scripted honest solution is correct, not just compiled."""
    with ValidatorPool() as pool:
        module = load_bench()
        problems = module.user_problems(user_problems(tmp_path / "problems"))
        evaluated = module.EvalSet("user_style", problems, [])
        scores = module.score_set(evaluated, Scripted(module, candidates=2), pool, Budget(), compile_only=False)
    assert scores["correct_rate"] == 0.5 and scores["best_of_n"] == 0.5
