""""Cannot check here" is its own outcome: a build that fails for want of a piece of this machine names the piece (a
CUDA build of torch, the toolkit's library headers, a compiler) and its fix in CLI and in editor terms, exits 3 from
`dice-copilot validate`, and is not cached. The README's example on this machine (CPU torch wheel + nvcc) included."""

import argparse
import json
import shutil
from pathlib import Path

import pytest
import torch

from dice_copilot.validator import commands, environment

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "inline_bias_relu.py"
TORCH_INCLUDE = "/site-packages/torch/include"

# What g++ prints when a CPU torch's ATen/cuda/CUDAContext.h reaches a toolkit header that is not installed.
CUSPARSE_FROM_ATEN = f"""$ c++ -c cuda.cu
In file included from /py{TORCH_INCLUDE}/ATen/cuda/CUDAContext.h:4,
                 from cuda.cu:6:
/py{TORCH_INCLUDE}/ATen/cuda/CUDAContextLight.h:10:10: fatal error: cusparse.h: No such file or directory
   10 | #include <cusparse.h>
compilation terminated.
"""
# The same CPU torch once the toolkit headers are there: its own CUDA part is missing.
CMAKE_MACROS_FROM_C10 = f"""In file included from /py{TORCH_INCLUDE}/c10/cuda/CUDAStream.h:7,
                 from cuda.cu:3:
/py{TORCH_INCLUDE}/c10/cuda/CUDAMacros.h:6:10: fatal error: c10/cuda/impl/cuda_cmake_macros.h: No such file or \
directory
"""
CANDIDATE_INCLUDES_CUBLAS = "cuda.cu:3:10: fatal error: cublas_v2.h: No such file or directory\n"
CANDIDATE_OWN_HEADER = "cuda.cu:3:10: fatal error: my_helpers.cuh: No such file or directory\n"
NO_NVCC = "$ nvcc -c cuda.cu -o cuda.cu.o\nnice: \u2018nvcc\u2019: No such file or directory\n"


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A fake machine: torch's build and a toolkit folder with the headers a test puts there."""
    toolkit = tmp_path / "cuda-12.8"
    (toolkit / "include").mkdir(parents=True)

    def set_up(torch_cuda: str | None, toolkit_headers: tuple[str, ...] = ()):
        monkeypatch.setattr(environment, "_torch_build", lambda: ("2.13.0" + ("+cpu" if torch_cuda is None else
                                                                              "+cu128"), torch_cuda))
        monkeypatch.setattr(environment, "_toolkit_folder", lambda: str(toolkit))
        monkeypatch.setattr(environment, "_toolkit_version", lambda folder: "12.8")
        for header in toolkit_headers:
            (toolkit / "include" / header).write_text("")
        return toolkit

    return set_up


def test_a_cpu_torch_reaching_torchs_cuda_headers_needs_a_cuda_build_of_torch(machine):
    machine(torch_cuda=None)
    for log in (CUSPARSE_FROM_ATEN, CMAKE_MACROS_FROM_C10):
        piece = environment.diagnose_build(log)
        assert piece.needs == environment.CUDA_TORCH
        assert "CUDA build of torch" in piece.message and "2.13.0+cpu is a CPU build" in piece.message
    piece = environment.diagnose_build(CUSPARSE_FROM_ATEN)
    assert (piece.missing, piece.included_by, piece.reached_from) == \
        ("cusparse.h", "ATen/cuda/CUDAContextLight.h", "ATen/cuda/CUDAContext.h")
    assert "`ATen/cuda/CUDAContext.h` needs a CUDA build of torch" in piece.message
    # The fix: a CUDA torch wheel matching the toolkit, and the toolkit's library headers it will also need.
    assert "-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" in piece.fix_cli
    assert "cuSPARSE, cuBLAS, cuSOLVER" in piece.fix_cli and "cuda-libraries-dev-12-8" in piece.fix_cli
    assert "CUDA_HOME" in piece.fix_cli and "diceCopilot" not in piece.fix_cli and "nvcc.path" not in piece.fix_cli
    assert "the Python the server runs" in piece.fix_editor and "restart the server" in piece.fix_editor
    assert "diceCopilot.nvcc.path" in piece.fix_editor and "CUDA_HOME" not in piece.fix_editor


def test_a_cpu_torch_with_a_complete_toolkit_needs_only_a_cuda_torch(machine):
    machine(torch_cuda=None, toolkit_headers=environment.TORCH_CUDA_NEEDS)
    piece = environment.diagnose_build(CMAKE_MACROS_FROM_C10)
    assert piece.needs == environment.CUDA_TORCH and piece.toolkit_lacks == ()
    assert "apt install" not in piece.fix_cli and "pip install torch==2.13.0" in piece.fix_cli


def test_a_cuda_torch_missing_toolkit_headers_needs_the_toolkits_dev_headers(machine):
    toolkit = machine(torch_cuda="12.8")
    piece = environment.diagnose_build(CUSPARSE_FROM_ATEN)
    assert piece.needs == environment.TOOLKIT_HEADERS
    assert f"the CUDA toolkit at {toolkit} lacks `cusparse.h` (cuSPARSE's development header)" in piece.message
    assert "cuSPARSE development headers" in piece.fix_cli and "cuda-libraries-dev-12-8" in piece.fix_cli
    assert "CUDA_HOME" in piece.fix_cli and "nvcc.path" not in piece.fix_cli and "pip" not in piece.fix_cli
    assert "diceCopilot.nvcc.path" in piece.fix_editor
    # A library header the candidate includes itself is the toolkit's too.
    assert environment.diagnose_build(CANDIDATE_INCLUDES_CUBLAS).needs == environment.TOOLKIT_HEADERS


def test_a_header_of_the_candidates_own_is_its_compile_error(machine):
    machine(torch_cuda=None)
    assert environment.diagnose_build(CANDIDATE_OWN_HEADER) is None
    assert environment.diagnose_build("cuda.cu:5:1: error: expected ';' before '}' token\n") is None


def test_a_missing_nvcc_is_a_missing_compiler(machine):
    machine(torch_cuda=None)
    piece = environment.diagnose_build(NO_NVCC)
    assert piece.needs == environment.COMPILER and piece.missing == "nvcc"
    assert "PATH" in piece.fix_cli and "nvcc.path" not in piece.fix_cli
    assert "diceCopilot.nvcc.path" in piece.fix_editor


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.run(args)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or torch.version.cuda is not None,
                    reason="the machine the README sets up: the CPU torch wheel and nvcc")
def test_the_readme_example_exits_3_naming_a_cuda_torch_on_the_readme_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DICE_COPILOT_CACHE", str(tmp_path / "cache"))
    argv = ["validate", str(EXAMPLE), "--reference", str(EXAMPLE)]
    assert _run_cli(argv) == commands.EXIT_NOT_CHECKED
    out = capsys.readouterr().out
    assert out.startswith("? not checked (compile stage): this machine cannot check the kernel (not its fault): "
                          "`ATen/cuda/CUDAContext.h` needs a CUDA build of torch"), out
    fix = next(line for line in out.splitlines() if line.startswith("  fix: "))
    assert "install a CUDA build of torch" in fix and "-m pip install torch==" in fix
    assert "nvcc.path" not in out and "diceCopilot" not in out  # editor settings mean nothing on the command line
    # Not cached: the fix installed, the next run builds again.
    assert not list((tmp_path / "cache").rglob("result.json"))

    assert _run_cli([*argv, "--json"]) == commands.EXIT_NOT_CHECKED
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["stage"], verdict["failed_stage"], verdict["outcome"], verdict["failure_code"]) == \
        ("compile", "compile", "not_checked", "environment")
    assert verdict["passed"] is False and verdict["details"]["environment"]["needs"] == "cuda_torch"
    assert verdict["details"]["environment"]["torch_cuda"] is None


def test_the_exit_codes_follow_the_outcome():
    assert commands.EXIT_CODES == {"passed": 0, "failed": 1, "not_checked": 3} and commands.EXIT_USAGE == 2


@pytest.mark.gpu
@pytest.mark.slow
def test_the_readme_example_passes_on_a_cuda_machine(tmp_path, monkeypatch, capsys):
    """With a CUDA build of torch and a complete toolkit the same command checks everything: exit 0, timed."""
    monkeypatch.setenv("DICE_COPILOT_CACHE", str(tmp_path / "cache"))
    code = _run_cli(["validate", str(EXAMPLE), "--reference", str(EXAMPLE), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == commands.EXIT_PASSED, verdict["failure"]
    assert (verdict["outcome"], verdict["stage"], verdict["failed_stage"], verdict["compile_only"]) == \
        ("passed", "timed", None, False)
