"""Validator compile stage with the real nvcc/g++ (no GPU needed): compile-only verdicts, errors mapped to the
candidate's lines (inside a Python string and in a .cu file), and the compile timeout."""

import os
import shutil
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dice_copilot.validator import Budget, Candidate, Problem, ValidatorPool
from dice_copilot.validator.compile import CompileConfig

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    def get_inputs():
        return [torch.randn(1024)]

    def get_init_inputs():
        return []
''')

HONEST = textwrap.dedent('''
    import torch
    from torch.utils.cpp_extension import load_inline

    kernel = """
    __global__ void twice_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }

    torch::Tensor twice(torch::Tensor x) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        twice_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
    """

    ext = load_inline(name="twice", cpp_sources="torch::Tensor twice(torch::Tensor x);", cuda_sources=kernel,
                      functions=["twice"])


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return ext.twice(x)
''')


def _pool(tmp_path, **config) -> ValidatorPool:
    # gpus=[]: compile-only even where a GPU exists; no PCH so a single build does not wait for one.
    return ValidatorPool(gpus=[], compile_config=CompileConfig(cache_dir=tmp_path / "cache", use_pch=False,
                                                               **config), warm=False)


def test_kernel_error_inside_python_string_maps_to_file_line(tmp_path):
    broken = HONEST.replace("y[i] = 2.0f * x[i];", "y[i] = 2.0f * x[i]")  # missing ';'
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "y[i] = 2.0f * x[i]" in text)
    start = time.monotonic()
    with _pool(tmp_path) as pool:
        verdict = pool.validate(REFERENCE, Candidate.from_source(broken, path="cand.py"))
    assert not verdict.passed and verdict.failure_code == "compile_error" and verdict.stage == "compile"
    errors = [d for d in verdict.diagnostics if d.severity == "error"]
    assert errors and errors[0].file == "cand.py" and errors[0].line in (line, line + 1)
    assert "compile error at line" in verdict.summary()
    # Kernel errors come from the torch-free kernels file: no torch headers compiled to report them.
    assert time.monotonic() - start < 60


def test_error_in_cu_file_maps_to_cu_line(tmp_path):
    cu = tmp_path / "bad.cu"
    cu.write_text("__global__ void k(float* x) {\n    x[threadIdx.x] = undefined_name;\n}\n")
    with _pool(tmp_path) as pool:
        verdict = pool.validate(REFERENCE, Candidate.from_file(cu))
    assert verdict.failure_code == "compile_error"
    error = next(d for d in verdict.diagnostics if d.severity == "error")
    assert (error.file, error.line) == (str(cu.resolve()), 2) and "undefined_name" in error.message


def test_cu_file_without_builder_compiles_only_and_says_why(tmp_path):
    cu = tmp_path / "ok.cu"
    cu.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
    with _pool(tmp_path) as pool:
        verdict = pool.validate(REFERENCE, Candidate.from_file(cu))
    assert verdict.passed and verdict.compile_only and verdict.stage == "compile"
    assert "no Python module builds this .cu file" in verdict.details["not_run"]


def test_compile_timeout_kills_the_compiler_group(tmp_path):
    fake_nvcc = tmp_path / "slow-nvcc"
    fake_nvcc.write_text("#!/bin/sh\nsleep 300\n")
    fake_nvcc.chmod(0o755)
    start = time.monotonic()
    with _pool(tmp_path, nvcc=str(fake_nvcc)) as pool:
        verdict = pool.validate(REFERENCE, Candidate.from_source(HONEST), budget=Budget(compile_timeout_s=3))
    assert verdict.failure_code == "timeout" and "did not finish within 3 s" in verdict.failure
    assert time.monotonic() - start < 30
    # The bracket keeps pgrep from matching its own shell's command line.
    assert os.popen(f"pgrep -f '{tmp_path}/slow-nv[c]c'").read().strip() == ""


@pytest.mark.slow
def test_honest_candidate_gives_compile_only_verdict_and_is_cached(tmp_path):
    patient = Budget(compile_timeout_s=900)  # torch headers on a busy 2-core CI machine
    with _pool(tmp_path) as pool:
        verdict = pool.validate(Problem.from_source(REFERENCE), Candidate.from_source(HONEST), budget=patient)
        assert verdict.passed and verdict.compile_only and verdict.failure is None, verdict.compiler_log[-2000:]
        assert verdict.summary().startswith("✓ compiles")
        again = pool.validate(Problem.from_source(REFERENCE), Candidate.from_source(HONEST), budget=patient)
    assert again.passed and again.cached_build and again.stage_times["compile"] < 1.0
    assert list(Path(tmp_path / "cache").rglob("*.so"))


def test_a_header_missing_inside_the_toolkit_is_blamed_on_the_machine_not_the_kernel():
    from dice_copilot.validator.environment import diagnose_build  # the cases in test_validator_environment.py

    torch_side = ("/usr/lib/python3/site-packages/torch/include/ATen/cuda/CUDAContextLight.h:7:10: "
                  "fatal error: cusparse.h: No such file or directory")
    missing = diagnose_build(torch_side)
    assert (missing.missing, missing.included_by) == ("cusparse.h", "ATen/cuda/CUDAContextLight.h")
    # A header the candidate itself includes is the candidate's error.
    assert diagnose_build("/tmp/build/cuda.cu:3:10: fatal error: mine.h: No such file or directory") is None


# ---------------------------------------------------------------- the pool's stream of verdicts

def _numbered(count: int, pulled: list[int]):
    for i in range(count):
        pulled.append(i)
        yield REFERENCE, HONEST.replace("2.0f * x[i]", f"{i}.0f * x[i]")


def _number_of(work) -> int:
    return int(work.candidate.source.split(".0f * x[i]")[0].rsplit(" ", 1)[-1])


def test_the_pool_reads_a_stream_lazily_and_reports_verdicts_as_they_are_ready(tmp_path, monkeypatch):
    pool = _pool(tmp_path)

    def compile_slower_for_earlier(work):  # stands in for compiles of different lengths
        time.sleep(0.1 * (2 - _number_of(work) % 3))
        work.verdict.stage, work.verdict.passed, work.verdict.details["n"] = "compile", True, _number_of(work)

    monkeypatch.setattr(pool, "_static_and_compile", compile_slower_for_earlier)
    pulled: list[int] = []
    stream = pool.validate_iter(_numbered(9, pulled), max_in_flight=3)
    first = next(stream)
    assert pulled == [0, 1, 2]  # no more than max_in_flight read before the first verdict
    reported = [first, *stream]
    assert sorted(i for i, _ in reported) == list(range(9))
    assert all(v.details["n"] == i for i, v in reported)  # each verdict is its own item's
    assert [i for i, _ in reported] != list(range(9))  # the quick ones were not held back by slower ones
    pool.shutdown()


def test_a_stream_past_its_give_up_time_ends_without_waiting_for_a_hung_candidate(tmp_path, monkeypatch):
    pool = _pool(tmp_path)
    release = threading.Event()

    def compile_or_hang(work):
        if _number_of(work) == 1:
            release.wait(30)  # a compile that never finishes in time
        work.verdict.stage, work.verdict.passed = "compile", True

    monkeypatch.setattr(pool, "_static_and_compile", compile_or_hang)
    started = time.perf_counter()
    reported = list(pool.validate_iter(_numbered(3, []), max_in_flight=3, give_up_at=started + 1.0))
    waited = time.perf_counter() - started
    release.set()
    assert sorted(i for i, _ in reported) == [0, 2]  # the finished ones are reported, the hung one is not
    assert waited < 20  # it ended near its give-up time, not when the hung compile did
    pool.shutdown()


def test_a_validator_fault_fails_that_verdict_and_the_others_go_on(tmp_path, monkeypatch):
    pool = _pool(tmp_path)

    def compile_or_fail(work):
        if _number_of(work) == 3:
            raise OSError("No space left on device")
        work.verdict.stage, work.verdict.passed = "compile", True

    monkeypatch.setattr(pool, "_static_and_compile", compile_or_fail)
    verdicts = pool.validate_many(list(_numbered(6, [])))
    assert [v.passed for v in verdicts] == [True, True, True, False, True, True]
    assert verdicts[3].failure_code == "validator_error" and "No space left on device" in verdicts[3].failure
    pool.shutdown()


def test_the_common_precompiled_headers_are_built_side_by_side(tmp_path, monkeypatch):
    from dice_copilot.validator import compile as compile_module
    from dice_copilot.validator.compile import ExtensionBuilder

    builder = ExtensionBuilder(CompileConfig(cache_dir=tmp_path / "cache"))
    lock, running, most, built = threading.Lock(), [0], [0], []

    def build_pch(flags, extra_headers=(), base=compile_module.FULL_TORCH_HEADER):  # stands in for a g++ run
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
            built.append((base, extra_headers))
        return True

    monkeypatch.setattr(compile_module, "usable_cpus", lambda: 8)
    monkeypatch.setattr(builder, "build_pch", build_pch)
    monkeypatch.setattr(builder, "prebuild_signature_glues", lambda signatures: [])
    assert builder.prepare_common_headers() == [True] * 5
    assert len(set(built)) == 5 and most[0] == 5  # all five at once, not one after another
