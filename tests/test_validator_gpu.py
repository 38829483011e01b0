"""Validator on a real GPU: honest kernels pass with a speedup, a wrong kernel fails with its error, and faults
(infinite loop, illegal address, OOM, segfaulting host code, a compile that never ends) each give a failed verdict
within the time limit while the next verdict in the same pool succeeds."""

import os
import time
from pathlib import Path

import pytest

from dice_copilot.validator import Budget, Candidate, Problem, ValidatorPool
from dice_copilot.validator.compile import CompileConfig

pytestmark = pytest.mark.gpu

PROBLEMS = Path(__file__).resolve().parent.parent / "bench" / "validator_problems"
FAST = Budget(call_timeout_s=5, compile_timeout_s=240, timing_trials=30, min_timing_trials=10, timing_budget_s=3)


def _problem(name: str) -> Problem:
    return Problem.from_file(PROBLEMS / name / "reference.py")


def _candidate_text(name: str) -> str:
    return (PROBLEMS / name / "candidate.py").read_text()


def _variant(name: str, old: str, new: str) -> Candidate:
    text = _candidate_text(name)
    assert old in text, f"{old!r} not in {name}"
    return Candidate.from_source(text.replace(old, new), path=f"{name}_variant.py")


@pytest.fixture(scope="module")
def pool():
    with ValidatorPool() as p:
        yield p


@pytest.mark.parametrize("name", ["relu", "softmax", "matmul", "layer_norm", "mse_loss"])
def test_honest_kernels_pass_with_speedup(pool, name):
    verdict = pool.validate(_problem(name), Candidate.from_file(PROBLEMS / name / "candidate.py"), "ide", FAST)
    assert verdict.passed, (verdict.failure, verdict.compiler_log[-3000:], verdict.details.get("traceback"))
    assert verdict.stage == "timed" and verdict.speedup and verdict.speedup > 0
    assert verdict.timing["candidate"].n >= 10 and verdict.timing["reference"].n >= 10
    assert len(verdict.max_abs_error) == 1 and verdict.failure is None


def test_strict_policy_accepts_a_kernel_doing_all_the_work(pool):
    verdict = pool.validate(_problem("softmax"), Candidate.from_file(PROBLEMS / "softmax" / "candidate.py"),
                            "strict", FAST)
    assert verdict.passed, verdict.failure
    assert verdict.details["candidate_kernel_share"] >= 0.5


def test_wrong_kernel_is_incorrect_with_max_error(pool):
    wrong = _variant("relu", "v > 0.f ? v : 0.f", "v > 0.f ? v : 0.1f * v")
    verdict = pool.validate(_problem("relu"), wrong, "ide", FAST)
    assert not verdict.passed and verdict.failure_code == "incorrect"
    assert "max abs error" in verdict.failure and verdict.max_abs_error and verdict.max_abs_error[0] > 0.01


def _assert_survives(pool, verdict, started, limit):
    assert not verdict.passed
    assert time.monotonic() - started < limit
    follow_up = pool.validate(_problem("relu"), Candidate.from_file(PROBLEMS / "relu" / "candidate.py"), "ide",
                              Budget(timing=False, call_timeout_s=5))
    assert follow_up.passed, follow_up.failure


def test_infinite_loop_kernel_times_out_and_pool_survives(pool):
    hang = _variant("relu", "y[i] = v > 0.f ? v : 0.f;", "// A volatile global read each iteration: the compiler may not remove the loop.\n"
                    "        while (((volatile const float*)x)[0] == ((volatile const float*)x)[0]) { }\n        y[i] = v;")
    started = time.monotonic()
    verdict = pool.validate(_problem("relu"), hang, "ide", FAST)
    assert verdict.failure_code == "timeout", verdict.failure
    _assert_survives(pool, verdict, started, 240 + 60)


def test_illegal_memory_access_fails_and_pool_survives(pool):
    bad = _variant("relu", "y[i] = v > 0.f ? v : 0.f;", "y[i + (1L << 40)] = v;")
    started = time.monotonic()
    verdict = pool.validate(_problem("relu"), bad, "ide", FAST)
    assert verdict.failure_code in ("runtime_error", "crash"), verdict.failure
    _assert_survives(pool, verdict, started, 240 + 60)


def test_gpu_out_of_memory_fails_and_pool_survives(pool):
    oom = _variant("relu", "auto y = torch::empty_like(x);",
                   "auto hog = torch::empty({1L << 45}, x.options());\n    auto y = torch::empty_like(x);")
    started = time.monotonic()
    verdict = pool.validate(_problem("relu"), oom, "ide", FAST)
    assert verdict.failure_code == "runtime_error" and "memory" in verdict.failure.lower(), verdict.failure
    _assert_survives(pool, verdict, started, 240 + 60)


def test_segfaulting_host_code_fails_and_pool_survives(pool):
    segv = _variant("relu", "auto y = torch::empty_like(x);",
                    "if (x.numel() > 0) { volatile int* p = nullptr; *p = 1; }\n    auto y = torch::empty_like(x);")
    started = time.monotonic()
    verdict = pool.validate(_problem("relu"), segv, "ide", FAST)
    assert verdict.failure_code == "crash", verdict.failure
    _assert_survives(pool, verdict, started, 240 + 60)


def test_compile_that_never_ends_times_out_and_pool_survives(pool, tmp_path):
    fifo = tmp_path / "never_written"
    os.mkfifo(fifo)  # opening it for reading blocks forever: the preprocessor never finishes
    never = _variant("relu", "#include <c10/cuda/CUDAStream.h>", f'#include <c10/cuda/CUDAStream.h>\n#include "{fifo}"')
    started = time.monotonic()
    verdict = pool.validate(_problem("relu"), never, "ide", Budget(compile_timeout_s=10, call_timeout_s=5))
    assert verdict.failure_code == "timeout" and "did not finish within 10 s" in verdict.failure
    _assert_survives(pool, verdict, started, 60)


def test_infills_of_one_problem_share_a_warm_worker(tmp_path):
    """Kernel-body infills have distinct module names, so one worker imports them all without being replaced."""
    correct = _variant("relu", "y[i] = v > 0.f ? v : 0.f;", "y[i] = fmaxf(v, 0.f);")
    wrong = _variant("relu", "y[i] = v > 0.f ? v : 0.f;", "y[i] = fabsf(v);")
    again = _variant("relu", "y[i] = v > 0.f ? v : 0.f;", "y[i] = v < 0.f ? 0.f : v;")
    quick = Budget(timing=False, call_timeout_s=10, compile_timeout_s=240)
    # A cache of its own and no PCH: which units each build compiles must not depend on earlier runs.
    config = CompileConfig(cache_dir=tmp_path / "cache", use_pch=False)
    with ValidatorPool(gpus=[0], compile_config=config) as pool:
        first = pool.validate(_problem("relu"), Candidate.from_file(PROBLEMS / "relu" / "candidate.py"), "ide", quick)
        assert first.passed, (first.failure, first.compiler_log[-3000:])
        pid = pool._workers[0].proc.pid
        verdicts = [pool.validate(_problem("relu"), c, "ide", quick) for c in (correct, wrong, again)]
        assert verdicts[0].passed and verdicts[2].passed, [v.failure for v in verdicts]
        assert not verdicts[1].passed and verdicts[1].failure_code == "incorrect", verdicts[1].failure
        for verdict in verdicts:
            (build,) = verdict.details["builds"]
            assert build["strategy"] == "split" and verdict.details["fresh_worker"] is False
        assert [v.details["builds"][0]["compiled_units"] for v in verdicts] == [["kernels.cu", "module.cpp"]] * 3
        assert pool.worker_swaps == 0 and pool.worker_replacements == 0
        assert pool._workers[0].proc.pid == pid
        assert len(set(pool._workers[0].loaded_modules)) == 4
