"""`dice-copilot generate`: prompt building for each mode, errors a user can act on, and runs on the default
checkpoint that print the result once, say it is untrained once, and use the CPU's default length."""

import argparse
import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from dice_copilot.cli import main
from dice_copilot.model.commands import (
    CPU_DEFAULT_MAX_NEW_TOKENS,
    UsageError,
    _ProgressLine,
    build_prompt,
    register,
    result_code,
)
from dice_copilot.model.decoding import DEFAULT_SAMPLING_TEMPERATURE
from dice_copilot.model.prompts import end_to_end_prompt, infill_prompt

MODULE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0)


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
"""
PROMPT = "__global__ void"
SKELETON = 'source = """\n__global__ void k(const float* x, float* out, int n) {\n<FILL>\n}\n"""\n'


def parse(*argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["generate", *argv])


@pytest.fixture
def files(tmp_path):
    (tmp_path / "model.py").write_text(MODULE)
    (tmp_path / "skeleton.py").write_text(SKELETON)
    return tmp_path


def test_module_builds_the_dice_end_to_end_prompt(files):
    mode, prompt, skeleton, reference = build_prompt(parse("--module", str(files / "model.py")))
    assert (mode, prompt, skeleton) == ("e2e", end_to_end_prompt(MODULE), None)
    assert (reference.source, reference.path, reference.class_name) == (MODULE, str(files / "model.py"), "Model")


def test_raw_mode_sends_the_text_unchanged():
    assert build_prompt(parse("--prompt", "<|im_start|>user\nhi")) == ("raw", "<|im_start|>user\nhi", None, None)


def test_infill_mode_splits_the_skeleton_at_the_marker(files):
    args = parse("--file", str(files / "skeleton.py"), "--mode", "infill", "--reference", str(files / "model.py"))
    mode, prompt, (prefix, suffix), reference = build_prompt(args)
    assert prefix + "<FILL>" + suffix == SKELETON
    assert prompt == infill_prompt(MODULE, prefix, suffix)
    whole = f"```python\n{prefix}    out[0] = x[0];{suffix}```"
    assert result_code(mode, whole, (prefix, suffix)) == "    out[0] = x[0];"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--file", "{skeleton}", "--mode", "infill"], "needs --reference"),
        (["--prompt", "no marker", "--mode", "infill", "--reference", "{model}"], "exactly one <FILL>"),
        (["--module", "{model}", "--mode", "raw"], "always builds the end-to-end prompt"),
        (["--module", "{missing}"], "does not exist"),
        (["--prompt", "   "], "empty"),
    ],
)
def test_bad_arguments_say_what_to_change(files, argv, message):
    paths = {"skeleton": files / "skeleton.py", "model": files / "model.py", "missing": files / "missing.py"}
    with pytest.raises(UsageError, match=message):
        build_prompt(parse(*[a.format(**paths) for a in argv]))


def test_missing_checkpoint_exits_2_with_the_folder_named(tmp_path, capsys):
    assert main(["generate", "--prompt", "x", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_generate_on_the_default_checkpoint_reports_untrained_stats_and_the_verdicts(files, capsys):
    code = main(["generate", "--module", str(files / "model.py"), "--max-new-tokens", "8", "-n", "2",
                 "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert code == 1  # the untrained checkpoint's noise: no candidate passes
    assert "UNTRAINED" in err
    result = json.loads(out)
    assert result["untrained"] is True and result["mode"] == "e2e" and result["validated"] is True
    assert result["shown"] is None
    assert result["decoding"]["max_new_tokens"] == {"value": 8, "source": "setting"}
    assert result["decoding"]["temperature"] == {"value": DEFAULT_SAMPLING_TEMPERATURE, "source": "default"}
    assert len(result["candidates"]) == 2
    for candidate in result["candidates"]:
        assert 1 <= candidate["stats"]["generated_tokens"] <= 8
        assert candidate["stats"]["forward_passes"] >= 1
        assert len(candidate["step_map"]) == len(candidate["token_ids"])
        assert candidate["verdict"] is None or candidate["verdict"]["passed"] is False


# The model's answers, scripted: what an untrained checkpoint cannot write (the engine still decodes for real).
GOOD_MODULE = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = \"\"\"
#include <torch/extension.h>

__global__ void relu_twice_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i] * 2.0f, 0.0f);
}

torch::Tensor relu_twice(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    relu_twice_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
\"\"\"

ext = load_inline(name="relu_twice", cpp_sources="torch::Tensor relu_twice(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_twice"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_twice(x.contiguous())
"""
BROKEN_MODULE = GOOD_MODULE.replace("fmaxf(x[i] * 2.0f, 0.0f)", "fmaxf(x[i] * 2.0f, undefined_name)")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("build-cache")  # the validator's, shared by this file's tests alone


@pytest.fixture
def scripted_answers(monkeypatch, build_cache):
    """The engine decodes as usual, then its answers' texts become these (one per candidate)."""
    from dice_copilot.model.engine import BlockDiffusionEngine

    monkeypatch.setenv("DICE_COPILOT_CACHE", str(build_cache))

    answers = []
    decode = BlockDiffusionEngine.generate

    def generate(self, prompts, n=1, **kwargs):
        kwargs["max_new_tokens"] = 4
        generations = decode(self, prompts, n=n, **kwargs)
        return [dataclasses.replace(g, text=text) for g, text in zip(generations, answers)]

    monkeypatch.setattr(BlockDiffusionEngine, "generate", generate)
    return answers


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to compile the candidates")


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_only_the_candidate_that_passes_validation_is_printed_and_what_was_checked_is_said(files, scripted_answers,
                                                                                        capsys):
    scripted_answers += [f"```python\n{BROKEN_MODULE}```", "no code here", f"```python\n{GOOD_MODULE}```"]
    code = main(["generate", "--module", str(files / "model.py"), "-n", "3", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == GOOD_MODULE.strip()
    assert '[candidate 0] ✗ compile error at line 10: identifier "undefined_name" is undefined' in err
    assert "[candidate 1] no code block in the output" in err
    if torch.cuda.is_available():
        assert "printing candidate 2 (validated on the GPU)" in err
    else:
        assert "[candidate 2] ✓ compiles (correctness and speed not run" in err
        assert "printing candidate 2 (compile-checked only: no CUDA device here" in err


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_infill_answer_is_validated_as_the_filled_skeleton_and_printed_as_the_fill(files, scripted_answers,
                                                                                      capsys):
    skeleton = GOOD_MODULE.replace("    if (i < n) out[i] = fmaxf(x[i] * 2.0f, 0.0f);\n", "<FILL>")
    (files / "skeleton.py").write_text(skeleton)
    fill = "    if (i < n) out[i] = fmaxf(x[i] * 2.0f, 0.0f);\n"
    prefix, suffix = skeleton.split("<FILL>")
    scripted_answers.append(f"```python\n{prefix}{fill}{suffix}```")
    code = main(["generate", "--file", str(files / "skeleton.py"), "--mode", "infill", "--reference",
                 str(files / "model.py"), "--device", "cpu", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["shown"] == 0
    (candidate,) = result["candidates"]
    assert candidate["code"] == fill and candidate["verdict"]["passed"] is True


def test_no_validate_prints_every_candidate_unchecked(files, scripted_answers, capsys):
    scripted_answers += [f"```python\n{BROKEN_MODULE}```", f"```python\n{GOOD_MODULE}```"]
    code = main(["generate", "--module", str(files / "model.py"), "-n", "2", "--device", "cpu", "--no-validate"])
    out, err = capsys.readouterr()
    assert code == 0
    assert BROKEN_MODULE.strip() in out and GOOD_MODULE.strip() in out and "# ----- candidate 1 -----" in out
    assert "✗" not in err and "✓" not in err


def test_no_candidate_passing_prints_nothing_and_exits_1(files, scripted_answers, capsys):
    scripted_answers += ["```python\nimport torch\n```"]  # no ModelNew: the static checks reject it at once
    code = main(["generate", "--module", str(files / "model.py"), "--device", "cpu"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert "[candidate 0] ✗" in err and "ModelNew" in err
    assert "no candidate passed validation (ide policy), so nothing is printed; --no-validate" in err


def test_a_checkpoints_decoding_defaults_rule_where_no_flag_is_given(files, scripted_answers, capsys, tmp_path):
    from dice_copilot.model.checkpoint import resolve_checkpoint_dir, write_decoding_defaults

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(resolve_checkpoint_dir("default"), checkpoint)
    write_decoding_defaults(checkpoint, {"strategy": "static", "num_return_sequences": 3, "temperature": 0.5,
                                         "top_k": 20})
    scripted_answers += ["x", "y", "z"]
    main(["generate", "--module", str(files / "model.py"), "--checkpoint", str(checkpoint), "--device", "cpu",
          "--json", "--top-k", "5"])
    decoding = json.loads(capsys.readouterr().out)["decoding"]
    assert decoding["num_return_sequences"] == {"value": 3, "source": "checkpoint"}
    assert decoding["strategy"] == {"value": "static", "source": "checkpoint"}
    assert decoding["temperature"] == {"value": 0.5, "source": "checkpoint"}
    assert decoding["top_k"] == {"value": 5, "source": "setting"}
    assert decoding["threshold"]["source"] == "default"


@pytest.mark.timeout(300)
def test_the_result_is_printed_once_and_the_untrained_warning_once(capsys):
    assert main(["generate", "--prompt", PROMPT, "--max-new-tokens", "8", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert out.strip(), "the untrained checkpoint decodes some text for this prompt"
    assert out.strip() not in err  # stderr is not a terminal here: nothing streamed
    assert err.count("UNTRAINED") == 1
    assert "forward passes" in err and "tokens/forward" in err and "tok/s" in err


@pytest.mark.timeout(300)
def test_stream_writes_the_text_to_stderr_as_it_is_decoded(capsys):
    assert main(["generate", "--prompt", PROMPT, "--max-new-tokens", "8", "--device", "cpu", "--stream"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and out.strip() in err
    assert err.count("UNTRAINED") == 1


@pytest.mark.timeout(300)
def test_the_cpu_default_length_is_used_and_said(capsys):
    assert main(["generate", "--prompt", PROMPT, "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"at most {CPU_DEFAULT_MAX_NEW_TOKENS} new tokens, the CPU default" in err
    generated = int(err.split("[candidate 0] ")[1].split(" tokens in")[0])
    assert 1 <= generated <= CPU_DEFAULT_MAX_NEW_TOKENS


def test_a_terminal_sees_a_progress_line_that_is_erased_at_the_end(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(_ProgressLine, "REFRESH_S", 0.0)
    progress = _ProgressLine(terminal, most_tokens=16)
    for candidate, committed, total in ((0, 4, 4), (1, 4, 8), (0, 8, 12)):  # each update: a candidate's tokens so far
        progress(SimpleNamespace(index=candidate, token_ids=list(range(committed)), text="x" * committed))
        assert terminal.line().startswith(f"decoding: {total}/16 tokens, ")
    progress.close()
    assert terminal.line().strip() == "" and "\n" not in terminal.written


class _Terminal:
    """What a terminal shows on its current line: each carriage return writes over it from the first column."""

    def __init__(self):
        self.written = ""

    def write(self, text: str) -> None:
        self.written += text

    def flush(self) -> None:
        pass

    def line(self) -> str:
        shown = ""
        for piece in self.written.split("\r"):
            shown = piece + shown[len(piece):]
        return shown
