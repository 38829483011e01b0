"""The `dice-copilot` command line as a whole: help and argument errors answer without importing torch, and every
option's help says its default."""

import argparse
import json
import subprocess
import sys

import pytest

from dice_copilot.cli import build_parser


def run_cli_without_torch(argvs: list[list[str]]) -> list[dict]:
    """Run `main(argv)` for each argv in one fresh interpreter; for each: the exit code and the stderr text, and
    whether torch was imported by then."""
    script = """
import contextlib, io, json, sys
from dice_copilot.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    results.append({"code": code, "stderr": err.getvalue(), "torch": "torch" in sys.modules})
print(json.dumps(results))
"""
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def subcommand_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser, e.g. (), ("generate",), ("train", "cuke", "build")."""
    paths = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += subcommand_paths(sub, path + (name,))
    return paths


def options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser, action) for every option of every command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, path + (name,))
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            yield path, parser, action


def test_every_help_answers_without_importing_torch():
    paths = subcommand_paths(build_parser())
    assert ("train", "cuke", "build") in paths and ("eval", "kernelbench") in paths and ("train", "sft") in paths
    results = run_cli_without_torch([[*path, "--help"] for path in paths])
    for path, result in zip(paths, results):
        assert result["code"] == 0, (path, result["stderr"])
        assert not result["torch"], f"dice-copilot {' '.join(path)} --help imported torch"


ARGUMENT_ERRORS = [
    (["generate", "--module", "m.py", "--bogus"], "unrecognized arguments: --bogus"),
    (["generate"], "one of the arguments --prompt --file --module is required"),
    (["generate", "--prompt", "x", "-n", "0"], "must be at least 1"),
    (["generate", "--prompt", "x", "--max-new-tokens", "many"], "expected a whole number"),
    (["generate", "--prompt", "x", "--stream", "--quiet"], "not allowed with argument"),
    (["validate", "candidate.py"], "the following arguments are required: --reference"),
    (["validate", "c.py", "-r", "r.py", "--policy", "lenient"], "invalid choice: 'lenient'"),
    (["train", "cuke", "build", "--out", "o", "--shard", "5/2"], "need 0 <= i < n"),
    (["train", "sft"], "the following arguments are required: CONFIG"),
    (["eval", "kernelbench", "kb", "--level", "1", "--checkpoint", "c", "--samples", "0"], "must be at least 1"),
    (["serve", "--tcp", "port"], "invalid int value"),
]


def test_argument_errors_exit_2_without_importing_torch():
    results = run_cli_without_torch([argv for argv, _ in ARGUMENT_ERRORS])
    for (argv, message), result in zip(ARGUMENT_ERRORS, results):
        assert result["code"] == 2, argv
        assert message in result["stderr"], (argv, result["stderr"])
        assert not result["torch"], argv


def test_every_option_help_says_its_default():
    for path, parser, action in options(build_parser()):
        where = f"dice-copilot {' '.join(path)} {action.option_strings[0]}"
        assert action.help, f"{where} has no help text"
        shown = parser._get_formatter()._get_help_string(action) % {"default": action.default}
        if not (action.default is None or action.default is False or action.default == []):
            assert "(default" in shown, f"{where}: help does not show the default {action.default!r}"


@pytest.mark.parametrize("argv, shown", [
    (["validate", "--help"], ["ide: the editor's checks", "strict:", "(default: ide)", "(default: 180.0)"]),
    (["train", "cuke", "build", "--help"], ["(default: 1.0)", "(default: 0)", "(default: no limit)"]),
    (["eval", "kernelbench", "--help"], ["exceeds this (default: the checkpoint's, else 0.9)"]),
    (["generate", "--help"], ["(default: the checkpoint's, else 1024 on a GPU, 256 on the CPU)", "(default: ide)"]),
])
def test_the_help_of_options_named_in_the_issue(argv, shown, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    text = " ".join(capsys.readouterr().out.split())  # the formatter wraps lines
    for phrase in shown:
        assert phrase in text, phrase



BROKEN_MODULES = {
    "syntax_error.py": "import torch\n\n\nclass Model(torch.nn.Module:\n    pass\n",
    "no_get_inputs.py": "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
    "no_model.py": "def get_inputs():\n    return []\n",
    "no_get_init_inputs.py": ("import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self, dim):\n"
                              "        super().__init__()\n\n    def forward(self, x):\n        return x\n\n\n"
                              "def get_inputs():\n    return [torch.randn(4)]\n"),
}


def test_generate_rejects_a_broken_module_with_validates_message_before_loading_a_model(tmp_path):
    paths = []
    for name, text in BROKEN_MODULES.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    generate = run_cli_without_torch([["generate", "--module", path] for path in paths])
    validate = run_cli_without_torch([["validate", path, "--reference", path] for path in paths])
    for path, generated, validated in zip(paths, generate, validate):
        assert generated["code"] == validated["code"] == 2, path
        assert not generated["torch"], f"generate imported torch before rejecting {path}"
        assert generated["stderr"].startswith("error: ") and generated["stderr"] == validated["stderr"]


def test_generate_rejects_bad_infill_input_before_loading_a_model(tmp_path):
    skeleton = tmp_path / "skeleton.py"
    skeleton.write_text('source = """__global__ void k(float* x) { }"""\n')
    reference = tmp_path / "no_model.py"
    reference.write_text(BROKEN_MODULES["no_model.py"])
    good_reference = tmp_path / "reference.py"
    good_reference.write_text("class Model:\n    pass\n\n\ndef get_inputs():\n    return []\n")
    marked = tmp_path / "marked.py"
    marked.write_text('source = """__global__ void k(float* x) { <FILL> }"""\n')
    no_marker, bad_reference = run_cli_without_torch([
        ["generate", "--file", str(skeleton), "--mode", "infill", "--reference", str(good_reference)],
        ["generate", "--file", str(marked), "--mode", "infill", "--reference", str(reference)],
    ])
    assert no_marker["code"] == 2 and "exactly one <FILL> marker" in no_marker["stderr"] and not no_marker["torch"]
    assert bad_reference["code"] == 2 and "no class named 'Model'" in bad_reference["stderr"]
    assert not bad_reference["torch"]
