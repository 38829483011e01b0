"""The server's side of the verdict contract: settings become the validator's Budget and CompileConfig, passed as
JSON to the validation worker and rebuilt there (no environment writes in a running process; the toolkit's
environment is the worker's at start), and a verdict this machine could not check reads in the editor's terms."""

import dataclasses
import json
import os

from dice_copilot.server import backend
from dice_copilot.server.settings import NvccSettings, ServerSettings, ValidationSettings
from dice_copilot.validator import Budget, CompileConfig, Verdict
from dice_copilot.validator.compile import default_cache_dir


def _request(settings: ServerSettings) -> dict:
    return backend.validation_request(["candidate"], "k.py", "reference", "ref.py", "Model", settings)


def test_the_request_carries_the_budget_and_compile_config_built_from_the_settings(tmp_path):
    nvcc = tmp_path / "cuda-12.8" / "bin" / "nvcc"
    settings = ServerSettings(validation=ValidationSettings(atol=0.5, timing=False, timeoutS=42.0),
                              nvcc=NvccSettings(path=str(nvcc), flags=("-lineinfo",), arch="sm_80"))
    request = json.loads(json.dumps(_request(settings)))  # what crosses the pipe
    budget = Budget(**request["budget"])
    assert budget == Budget(atol=0.5, timing=False, total_timeout_s=42.0, compile_timeout_s=42.0)
    config = CompileConfig(**request["compile_config"])
    assert (config.nvcc, config.arch) == (str(nvcc), "sm_80")
    assert config.cache_dir != str(default_cache_dir())  # extra nvcc flags build into a cache of their own
    assert request["worker_env"]["CUDA_HOME"] == str(nvcc.resolve().parent.parent)
    assert request["worker_env"]["NVCC_APPEND_FLAGS"] == "-lineinfo"
    assert request["worker_env"]["PATH"].split(os.pathsep)[0] == str(nvcc.resolve().parent)


def test_default_settings_give_the_dataclasses_defaults():
    request = _request(ServerSettings())
    assert Budget(**request["budget"]) == Budget(compile_timeout_s=ValidationSettings.timeoutS,
                                                 total_timeout_s=ValidationSettings.timeoutS)
    assert CompileConfig(**request["compile_config"]) == dataclasses.replace(CompileConfig(),
                                                                             cache_dir=str(default_cache_dir()))
    assert request["worker_env"] == {}


def test_the_validation_worker_builds_its_pool_without_touching_the_environment(monkeypatch, tmp_path):
    made = []

    class FakePool:
        def __init__(self, gpus, compile_config):
            made.append(compile_config)

        def validate_many(self, items, policy, budget):
            made.append(budget)
            return [Verdict(stage="compile", passed=True, compile_only=True) for _ in items]

    settings = ServerSettings(validation=ValidationSettings(timeoutS=7.0),
                              nvcc=NvccSettings(path=str(tmp_path / "bin" / "nvcc"), flags=("-O3",), arch="sm_90"))
    request = json.loads(json.dumps(_request(settings)))
    request["candidates"] = [{"source": "import torch\n", "path": "k.py"}]
    request["problem"]["source"] = ("import torch\nclass Model(torch.nn.Module):\n    pass\n"
                                    "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    monkeypatch.setattr(backend.import_validator(), "ValidatorPool", FakePool)
    monkeypatch.setattr(backend, "_pools", {})
    before = dict(os.environ)
    backend.run_validation(request)
    assert dict(os.environ) == before
    config, budget = made
    assert (config.nvcc, config.arch) == (str(tmp_path / "bin" / "nvcc"), "sm_90")
    assert budget == Budget(compile_timeout_s=7.0, total_timeout_s=7.0)


def _not_checked() -> dict:
    verdict = Verdict(stage="compile", failed_stage="compile", failure_code="environment",
                      failure="this machine cannot check the kernel (not its fault): torch is a CPU build",
                      details={"environment": {"needs": "cuda_torch", "fix_cli": "run pip (the CLI's words)",
                                               "fix_editor": "set diceCopilot.nvcc.path (the editor's words)"}})
    return json.loads(verdict.to_json())


def test_a_verdict_this_machine_could_not_check_reads_in_the_editors_terms():
    summary = backend.VerdictSummary.from_json(_not_checked())
    assert summary.not_checked and not summary.passed and summary.failed_stage == "compile"
    assert summary.failure.endswith("Fix: set diceCopilot.nvcc.path (the editor's words)")
    assert "CLI's words" not in summary.failure
    assert summary.describe().startswith("? not checked here: this machine cannot check the kernel")
    wire = summary.to_wire()
    assert (wire["outcome"], wire["stage"], wire["failedStage"]) == ("not_checked", "compile", "compile")


def test_the_status_reason_puts_a_machine_that_cannot_check_first():
    failed = backend.VerdictSummary.from_json(json.loads(Verdict(
        stage="compile", failed_stage="compile", failure_code="compile_error", failure="error").to_json()))
    wrong = backend.VerdictSummary.from_json(json.loads(Verdict(
        stage="correct", failed_stage="correct", failure_code="incorrect", failure="wrong").to_json()))
    unchecked = backend.VerdictSummary.from_json(_not_checked())
    assert backend.failure_reason([wrong]) == "validationFailed"
    assert backend.failure_reason([wrong, failed]) == "compileError"
    assert backend.failure_reason([failed, unchecked]) == "notChecked"
    assert backend.VerdictSummary.worker_failure("the validator failed: gone").not_checked


def test_the_startup_pings_pools_serve_requests_with_default_settings(monkeypatch):
    made = []

    class FakePool:
        def __init__(self, gpus, compile_config):
            made.append(compile_config)

        def shutdown(self):
            made.append("shutdown")

    validator = backend.import_validator()
    monkeypatch.setattr(validator, "ValidatorPool", FakePool)
    monkeypatch.setattr(backend, "_pools", {})
    backend.warm_validator(None)  # the ping before any request: a GPU pool and a compile-only pool
    warmed = dict(backend._pools)
    config = _request(ServerSettings())["compile_config"]
    assert {backend._pool(validator, config, compile_only=flag) for flag in (True, False)} == set(warmed.values())
    assert made == [CompileConfig(), CompileConfig()]  # nothing rebuilt, nothing shut down
