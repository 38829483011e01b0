"""The validator's typed contract: Stage / FailureCode / Outcome are their strings in JSON, a verdict says which
stage ran last and which failed and round-trips through JSON (old JSON without the new fields too), every validator
error derives from ValidatorError, and the Budget a caller passes (defaults included) is the one the harness uses."""

import json
import re
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest

from dice_copilot.validator import (Budget, FailureCode, InputError, Outcome, Stage, ValidatorError, ValidatorPool,
                                    Verdict, WorkerError)
from dice_copilot.validator.compile import CompileTimeout
from dice_copilot.validator.kernelbench_eval import KernelBenchLayoutError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("enum", [Stage, FailureCode, Outcome])
def test_the_enums_are_their_strings_in_json_in_comparisons_and_in_text(enum):
    for member in enum:
        assert json.dumps(member) == json.dumps(member.value)
        assert json.dumps({member: 1}) == json.dumps({member.value: 1})
        assert member == member.value and hash(member) == hash(member.value)
        assert str(member) == f"{member}" == member.value


def test_a_verdicts_json_is_the_same_with_enums_or_strings():
    typed = Verdict(stage=Stage.CORRECT, failed_stage=Stage.CORRECT, failure_code=FailureCode.INCORRECT,
                    failure="max abs error 0.3", stage_times={Stage.COMPILE: 1.5})
    plain = Verdict(stage="correct", failed_stage="correct", failure_code="incorrect", failure="max abs error 0.3",
                    stage_times={"compile": 1.5})
    assert typed.to_json() == plain.to_json()
    data = json.loads(typed.to_json())
    assert (data["stage"], data["failed_stage"], data["failure_code"], data["outcome"]) == \
        ("correct", "correct", "incorrect", "failed")


@pytest.mark.parametrize("verdict", [
    Verdict(stage=Stage.TIMED, passed=True, speedup=2.0),
    Verdict(stage=Stage.COMPILE, passed=True, compile_only=True, details={"not_run": "not run: no CUDA device"}),
    Verdict(stage=Stage.COMPILE, failed_stage=Stage.COMPILE, failure_code=FailureCode.ENVIRONMENT, failure="x",
            details={"environment": {"needs": "cuda_torch", "fix_cli": "install", "fix_editor": "install"}}),
    Verdict(stage=Stage.STATIC, failed_stage=Stage.STATIC, failure_code=FailureCode.STATIC, failure="eval"),
    Verdict(failure_code=FailureCode.BAD_INPUT, failure="cannot read"),
])
def test_a_verdict_round_trips_through_json(verdict):
    again = Verdict.from_json(verdict.to_json())
    assert again == verdict and again.outcome is verdict.outcome
    assert isinstance(again.stage, (Stage, type(None))) and isinstance(again.failure_code, (FailureCode, type(None)))


def test_the_outcome_says_whose_fault_a_failure_is():
    assert Verdict(stage="timed", passed=True).outcome is Outcome.PASSED
    assert Verdict(stage="correct", failed_stage="correct", failure_code="incorrect").outcome is Outcome.FAILED
    for code in ("environment", "validator_error"):
        assert Verdict(stage="compile", failed_stage="compile", failure_code=code).outcome is Outcome.NOT_CHECKED


def test_cleared_is_true_for_the_stages_that_ran_and_passed():
    passed = Verdict(stage="timed", passed=True)
    assert all(passed.cleared(stage) for stage in Stage)
    compile_only = Verdict(stage="compile", passed=True, compile_only=True)
    assert compile_only.cleared(Stage.COMPILE) and not compile_only.cleared(Stage.CORRECT)
    wrong = Verdict(stage="correct", failed_stage="correct", failure_code="incorrect")
    assert wrong.cleared(Stage.STATIC) and wrong.cleared(Stage.COMPILE) and not wrong.cleared(Stage.CORRECT)
    broken = Verdict(stage="compile", failed_stage="compile", failure_code="compile_error")
    assert broken.cleared(Stage.STATIC) and not broken.cleared(Stage.COMPILE)
    assert not Verdict(failure_code="bad_input").cleared(Stage.STATIC)


def _old(**fields) -> str:
    """A verdict as written before `failed_stage` and `outcome` (e.g. the committed CuKe progress)."""
    data = {"stage": None, "passed": False, "compile_only": False, "failure": None, "failure_code": None,
            "stage_times": {}, "compiler_log": "", "diagnostics": [], "max_abs_error": [], "max_rel_error": [],
            "speedup": None, "timing": {}, "flags": [], "cached_build": False, "details": {}}
    return json.dumps({**data, **fields})


@pytest.mark.parametrize("old, stage, failed_stage", [
    # `stage` used to be the last stage passed; a failure stopped at the one after it
    (_old(stage="timed", passed=True, speedup=1.5), "timed", None),
    (_old(stage="compile", passed=True, compile_only=True), "compile", None),
    (_old(stage="compile", failure_code="incorrect", failure="max abs error"), "correct", "correct"),
    (_old(stage="static", failure_code="compile_error", failure="error"), "compile", "compile"),
    (_old(stage=None, failure_code="static", failure="eval"), "static", "static"),
    (_old(stage=None, failure_code="bad_input", failure="unreadable"), None, None),
])
def test_old_json_without_the_new_fields_still_loads(old, stage, failed_stage):
    verdict = Verdict.from_json(old)
    assert (verdict.stage, verdict.failed_stage) == (stage, failed_stage)
    assert Verdict.from_json(verdict.to_json()) == verdict


def test_the_committed_cuke_verdicts_load():
    import lzma

    with lzma.open(ROOT / "bench" / "cuke_progress.jsonl.xz", "rt") as handle:
        rows = [json.loads(next(handle)) for _ in range(200)]
    verdicts = [Verdict.from_json(row["verdict"]) for row in rows]
    assert all(v.outcome is (Outcome.PASSED if v.passed else Outcome.FAILED) for v in verdicts)


def test_every_validator_error_derives_from_validator_error():
    for error in (InputError, WorkerError, CompileTimeout, KernelBenchLayoutError):
        assert issubclass(error, ValidatorError), error
    assert issubclass(InputError, ValueError)  # callers that catch ValueError keep working


# Where failure codes and stages are written or compared: only through the enums (a string literal of a code next
# to `failure_code` or `stage` is a second definition of it).
LITERAL_USE = re.compile(r"""(failure_code|\.stage|\["stage"\]|get\("stage"\))\s*(==|!=|=|in|not in)\s*[(\[]?\s*"""
                         r"""["'](%s)["']""" % "|".join(code.value for code in [*FailureCode, *Stage]))


def test_failure_codes_and_stages_are_written_and_compared_through_the_enums():
    offenders = []
    for folder in ("validator", "server", "trainer", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if LITERAL_USE.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0

    def get_inputs():
        return [torch.randn(256, 64)]

    def get_init_inputs():
        return []
''')
CANDIDATE = REFERENCE.replace("class Model(", "class ModelNew(").replace("torch.relu(x) * 2.0",
                                                                         "x.clamp_min(0.0) + x.clamp_min(0.0)")


def test_the_harness_rebuilds_the_budget_it_is_sent():
    from dice_copilot.validator import harness

    channel = harness._SilentChannel()
    sent = Budget(timing_budget_s=3.5, atol=0.0, n_correct_trials=7)
    job = harness.Job({"budget": asdict(sent), "policy": "ide"}, channel)
    assert job.budget == sent
    assert job.budget.tolerances(half=False) == (0.0, 1e-4, 1e-4)  # an atol of 0 is kept, not replaced
    # A job that leaves fields out gets the dataclass's defaults, not defaults of the harness's own.
    assert harness.Job({"budget": {}, "policy": "ide"}, channel).budget == Budget()


@pytest.mark.slow
def test_budget_defaults_reach_the_harness_unchanged():
    """A timed CPU verdict with the default timing fields: the timed loop ran with Budget's wall-clock cap and input
    sets (the harness once used 20 s where Budget said 10 s)."""
    budget = Budget(call_timeout_s=10)
    with ValidatorPool(run_on_cpu=True) as pool:
        verdict = pool.validate(REFERENCE, CANDIDATE, "ide", budget)
    assert verdict.passed and verdict.stage is Stage.TIMED and verdict.failed_stage is None, verdict.failure
    timing_env = verdict.details["timing_env"]
    assert timing_env["budget_s"] == Budget.timing_budget_s
    assert timing_env["input_sets"] == Budget.timing_input_sets
    assert verdict.timing["candidate"].n <= Budget.timing_trials


@pytest.mark.gpu
@pytest.mark.slow
def test_a_wrong_kernel_on_the_gpu_failed_the_correct_stage_after_compiling(tmp_path, monkeypatch):
    monkeypatch.setenv("DICE_COPILOT_CACHE", str(tmp_path / "cache"))
    example = (ROOT / "examples" / "inline_bias_relu.py").read_text()
    wrong = example.replace("v > 0.f ? v : 0.f", "v > 0.f ? v : 1.f")
    assert wrong != example
    with ValidatorPool() as pool:
        verdict = pool.validate(example, wrong, "ide", Budget(timing=False))
    assert (verdict.outcome, verdict.stage, verdict.failed_stage, verdict.failure_code) == \
        (Outcome.FAILED, Stage.CORRECT, Stage.CORRECT, FailureCode.INCORRECT), verdict.failure
    assert verdict.cleared(Stage.COMPILE) and not verdict.cleared(Stage.CORRECT)
