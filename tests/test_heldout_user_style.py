"""The held-out user-style set (bench/heldout_user_style/README.md), checked on the CPU: at least 40 problems; every
problem imports, defines Model/get_inputs/get_init_inputs and its reference runs on its own inputs; every solution
defines ModelNew, passes the strict static checks with no finding, and registers the reference's parameters and
buffers (so the validator copies the reference's weights into it); the manifest describes exactly the folders.
On a GPU (`gpu` marker), every solution passes the strict policy's correctness checks (bench/heldout_user_style/
check.py's verdicts)."""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension

from dice_copilot.validator.kernel_split import GLOBAL_KERNEL
from dice_copilot.validator.static_checks import check_static

SET = Path(__file__).resolve().parent.parent / "bench" / "heldout_user_style"
FOLDERS = sorted(p for p in SET.iterdir() if p.is_dir() and p.name[:2].isdigit())
MANIFEST = {p["name"]: p for p in tomllib.loads((SET / "manifest.toml").read_text())["problem"]}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MANIFEST_FIELDS = {"name", "does", "traits", "dtype", "kernels", "several_kernels"}
names = [f.name for f in FOLDERS]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_problem(folder: Path):
    return load_module(folder / "problem.py", f"heldout_problem_{folder.name}")


def as_tuple(output) -> tuple:
    return output if isinstance(output, tuple) else (output,)


def test_the_set_has_at_least_40_problems_each_with_both_files():
    assert len(FOLDERS) >= 40
    for folder in FOLDERS:
        assert (folder / "problem.py").is_file() and (folder / "solution.py").is_file(), folder.name


def test_manifest_lists_exactly_the_folders_in_order():
    listed = [p["name"] for p in tomllib.loads((SET / "manifest.toml").read_text())["problem"]]
    assert listed == names


@pytest.mark.parametrize("name", names)
def test_manifest_entry_describes_the_solution(name):
    entry = MANIFEST[name]
    assert set(entry) == MANIFEST_FIELDS
    assert entry["does"].strip() and entry["traits"] and all(isinstance(t, str) and t for t in entry["traits"])
    assert entry["dtype"] in DTYPES
    kernels = GLOBAL_KERNEL.findall((SET / name / "solution.py").read_text())
    assert entry["kernels"] == kernels
    assert entry["several_kernels"] == (len(kernels) > 1)


@pytest.mark.parametrize("name", names)
def test_reference_runs_on_its_inputs_on_the_cpu(name, single_torch_thread):
    problem = load_problem(SET / name)
    assert issubclass(problem.Model, torch.nn.Module)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).eval()
    inputs = problem.get_inputs()
    assert isinstance(inputs, list) and inputs
    with torch.no_grad():
        outputs = as_tuple(model(*inputs))
    assert outputs and all(isinstance(o, torch.Tensor) for o in outputs)
    for output in outputs:
        if output.is_floating_point():
            assert torch.isfinite(output).all(), f"{name}: non-finite reference output"
    # the manifest's dtype: that of the floating inputs, or of the floating outputs when every input is integer
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    floats = floats or [o for o in outputs if o.is_floating_point()]
    assert {x.dtype for x in floats} == {DTYPES[MANIFEST[name]["dtype"]]}


@pytest.mark.parametrize("name", names)
def test_solution_passes_the_strict_static_checks_without_findings(name):
    source = (SET / name / "solution.py").read_text()
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "ModelNew" in classes
    assert any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in classes["ModelNew"].body)
    findings = check_static(source, "strict", reference_source=(SET / name / "problem.py").read_text())
    assert findings == [], [f.message for f in findings]


@pytest.mark.parametrize("name", names)
def test_solution_registers_the_reference_parameters_and_buffers(name, monkeypatch):
    """The validator copies the reference's state_dict into ModelNew when names and shapes match; a non-persistent
    buffer ModelNew builds itself must equal the reference's. The extension build is replaced by a stand-in here."""
    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", lambda *args, **kwargs: object())
    problem = load_problem(SET / name)
    solution = load_module(SET / name / "solution.py", f"heldout_solution_{name}")
    sys.modules.pop(f"heldout_solution_{name}", None)
    init = problem.get_init_inputs()
    torch.manual_seed(0)
    reference = problem.Model(*init)
    torch.manual_seed(0)
    candidate = solution.ModelNew(*init)
    ref_state, cand_state = reference.state_dict(), candidate.state_dict()
    assert list(cand_state) == list(ref_state)
    for key, value in ref_state.items():
        assert (cand_state[key].shape, cand_state[key].dtype) == (value.shape, value.dtype), key
    ref_buffers = dict(reference.named_buffers())
    for key, value in candidate.named_buffers():
        if key not in cand_state:  # built by the constructor, not copied: must be the reference's table
            assert key in ref_buffers and torch.equal(value, ref_buffers[key]), key


@pytest.fixture(scope="module")
def gpu_verdicts():
    """Every solution's strict verdict (correctness, no timing), all through check.py's one ValidatorPool."""
    check = load_module(SET / "check.py", "heldout_user_style_check")
    problems = check.selected_problems([])
    return {problems[i]["name"]: verdict for i, verdict in check.validate_set(problems).items()}


@pytest.mark.gpu
@pytest.mark.parametrize("name", names)
def test_solution_is_correct_under_the_strict_policy_on_the_gpu(name, gpu_verdicts):
    verdict = gpu_verdicts[name]
    assert verdict.passed and not verdict.compile_only, verdict.summary()
