"""`dice-copilot generate`: prompt building for each mode, errors a user can act on, and runs on the default
checkpoint that print the result once, say it is untrained once, and use the CPU's default length."""

import argparse
import json
from types import SimpleNamespace

import pytest

from dice_copilot.cli import main
from dice_copilot.model.commands import (
    CPU_DEFAULT_MAX_NEW_TOKENS,
    UsageError,
    _ProgressLine,
    build_prompt,
    register,
    result_code,
)
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
    mode, prompt, skeleton = build_prompt(parse("--module", str(files / "model.py")))
    assert (mode, prompt, skeleton) == ("e2e", end_to_end_prompt(MODULE), None)


def test_raw_mode_sends_the_text_unchanged():
    assert build_prompt(parse("--prompt", "<|im_start|>user\nhi")) == ("raw", "<|im_start|>user\nhi", None)


def test_infill_mode_splits_the_skeleton_at_the_marker(files):
    args = parse("--file", str(files / "skeleton.py"), "--mode", "infill", "--reference", str(files / "model.py"))
    mode, prompt, (prefix, suffix) = build_prompt(args)
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
def test_generate_on_the_default_checkpoint_reports_untrained_and_stats(files, capsys):
    code = main(["generate", "--module", str(files / "model.py"), "--max-new-tokens", "8", "-n", "2",
                 "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "UNTRAINED" in err
    result = json.loads(out)
    assert result["untrained"] is True and result["mode"] == "e2e" and result["max_new_tokens"] == 8
    assert len(result["candidates"]) == 2
    for candidate in result["candidates"]:
        assert 1 <= candidate["stats"]["generated_tokens"] <= 8
        assert candidate["stats"]["forward_passes"] >= 1
        assert len(candidate["step_map"]) == len(candidate["token_ids"])


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
