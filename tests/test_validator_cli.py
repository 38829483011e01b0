"""`dice-copilot validate` exit codes and output, and worker isolation exercised on the CPU (pure-PyTorch candidates
run by the same harness: wrong answers, hangs and crashes give failed verdicts and the pool keeps working)."""

import argparse
import json
import subprocess
import sys
import textwrap
import types

import pytest

from dice_copilot.validator import Budget, ValidatorPool, commands, worker

REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.lin = torch.nn.Linear(dim, dim)

        def forward(self, x):
            return torch.relu(self.lin(x))

    def get_inputs():
        return [torch.rand(64, 32)]

    def get_init_inputs():
        return [32]
''')

CPU_CANDIDATES = {
    "honest": "return (x @ self.lin.weight.t() + self.lin.bias).clamp_min(0)",
    "identity_on_positive_inputs": "return self.lin(x)",
    "mutates_input": "x.zero_()\n        return torch.relu(self.lin(x))",
    "hangs": "while True:\n            x = x + 1",
    "segfaults": "import ctypes\n        ctypes.string_at(0)",
}


def _candidate(body: str) -> str:
    return textwrap.dedent('''
        import torch

        class ModelNew(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.lin = torch.nn.Linear(dim, dim)

            def forward(self, x):
                BODY
    ''').replace("BODY", body)


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.run(args)


def test_cli_exit_2_for_unreadable_reference(tmp_path, capsys):
    candidate = tmp_path / "cand.py"
    candidate.write_text(_candidate(CPU_CANDIDATES["honest"]))
    assert _run_cli(["validate", str(candidate), "--reference", str(tmp_path / "missing.py")]) == 2
    assert "cannot read the reference problem file" in capsys.readouterr().err


def test_cli_exit_2_for_reference_without_model(tmp_path):
    (tmp_path / "ref.py").write_text("x = 1\n")
    (tmp_path / "cand.py").write_text(_candidate(CPU_CANDIDATES["honest"]))
    assert _run_cli(["validate", str(tmp_path / "cand.py"), "--reference", str(tmp_path / "ref.py")]) == 2


def test_cli_exit_1_and_json_for_a_statically_rejected_candidate(tmp_path, capsys):
    (tmp_path / "ref.py").write_text(REFERENCE)
    (tmp_path / "cand.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                                      "    def forward(self, x):\n        return eval('x')\n")
    code = _run_cli(["validate", str(tmp_path / "cand.py"), "--reference", str(tmp_path / "ref.py"), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1 and verdict["failure_code"] == "static" and verdict["outcome"] == "failed"
    assert verdict["stage"] == verdict["failed_stage"] == "static"


@pytest.fixture(scope="module")
def cpu_verdicts():
    """One CPU worker validates every candidate in turn: later verdicts prove the pool survived earlier faults."""
    budget = Budget(call_timeout_s=2, timing=True, timing_budget_s=0.5, min_timing_trials=5, timing_trials=10)
    order = ["honest", "identity_on_positive_inputs", "mutates_input", "hangs", "segfaults", "honest"]
    verdicts = []
    with ValidatorPool(run_on_cpu=True) as pool:
        for name in order:
            verdicts.append((name, pool.validate(REFERENCE, _candidate(CPU_CANDIDATES[name]), "ide", budget)))
    return verdicts


@pytest.mark.slow
def test_cpu_harness_verdicts_and_survival(cpu_verdicts):
    by_name = [(name, v) for name, v in cpu_verdicts]
    honest = by_name[0][1]
    assert honest.passed and honest.stage == "timed" and honest.speedup and honest.max_abs_error[0] < 1e-4
    assert honest.timing["candidate"].n >= 5
    wrong = by_name[1][1]
    assert not wrong.passed and wrong.failure_code == "incorrect" and "max abs error" in wrong.failure
    assert wrong.max_abs_error and wrong.max_abs_error[0] > 1e-2
    mutating = by_name[2][1]
    assert not mutating.passed and mutating.failure_code == "cheat" and "modified input 0" in mutating.failure
    hang = by_name[3][1]
    assert hang.failure_code == "timeout" and hang.stage_times["gpu"] < 20
    crash = by_name[4][1]
    assert crash.failure_code in ("crash", "static"), crash.failure
    assert by_name[5][1].passed, by_name[5][1].failure


def test_the_workers_warm_up_verdict_passes():
    """Each GPU worker runs this small verdict before its first job (a head start, not a check): it must pass, or
    every worker start would pay for a failing one and warm nothing. In a process of its own, as in a worker: the
    harness counts the process's threads, and this one's come and go with the other tests."""
    script = ("import json; from dice_copilot.validator import harness; "
              "print(json.dumps(harness.warm_up('cpu'), default=str))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["passed"], outcome.get("failure")
    assert outcome["stage_times"]["correct"] > 0


HALF_MODULE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.bias = torch.nn.Parameter(0.5 * torch.randn(dim).half())

        def forward(self, x):
            HALF_FORWARD

    def get_inputs():
        return [torch.randn(64, 512).half()]

    def get_init_inputs():
        return [512]
''')
HALF_REFERENCE_FORWARD = "return torch.log_softmax(x + self.bias, dim=-1).clamp(-1.0, 1.0)"

HALF_CANDIDATES = {
    # keeps x + bias in float32, as a fused kernel would: off the float16 reference by its rounding on x100 inputs
    "more_precise": "return torch.log_softmax(x.float() + self.bias.float(), -1).clamp(-1.0, 1.0).half()",
    # right on the problem's inputs, wrong on large ones
    "clamps_inputs": "return torch.log_softmax((x + self.bias).clamp(-6.0, 6.0), -1).clamp(-1.0, 1.0)",
}


@pytest.mark.slow
def test_scaled_input_trials_excuse_only_the_references_own_rounding(monkeypatch):
    # Fixed inputs: whether the scaled trials push the precise candidate past atol depends on them (with fresh ones
    # per verdict, 2 of 40 kept it within atol, so the excuse went untested and the check failed). The inputs come
    # from the job's seed and the worker's secret, so both are fixed; a fixed seed alone failed 1 run in 11.
    monkeypatch.setattr(worker, "secrets", types.SimpleNamespace(token_hex=lambda n: "5eed" * (n // 2)))
    budget = Budget(call_timeout_s=5, timing=False, seed=0)
    reference = HALF_MODULE.replace("HALF_FORWARD", HALF_REFERENCE_FORWARD)
    candidate = HALF_MODULE.replace("class Model(", "class ModelNew(")  # the same module, another forward
    with ValidatorPool(run_on_cpu=True) as pool:
        precise, clamping = (pool.validate(reference, candidate.replace("HALF_FORWARD", HALF_CANDIDATES[name]),
                                           "ide", budget) for name in ("more_precise", "clamps_inputs"))
    assert precise.passed, precise.failure
    assert precise.max_abs_error[0] > 0.01  # against the float16 reference: beyond atol, within its own error
    assert not clamping.passed and clamping.failure_code == "incorrect" and "(base inputs)" not in clamping.failure


@pytest.mark.parametrize("cand_event, cand_wall, ref_event, ref_wall, flagged", [
    (0.01, 1.20, 1.00, 1.06, True),  # the work runs on a side stream: the host waits for it, the events do not
    (0.013, 0.12, 0.09, 0.13, False),  # a tiny kernel on a busy host: its call costs what the reference's does
    (0.01, 0.50, 0.20, 0.60, False),  # the reference shows the same gap: the host, not the candidate
    (0.50, 0.60, 1.00, 1.05, False),  # within 1.5x of its GPU time
])
def test_host_time_beyond_gpu_time_flags_hidden_work_only_beyond_the_references(cand_event, cand_wall, ref_event,
                                                                                ref_wall, flagged):
    from dice_copilot.validator.harness import looks_like_hidden_work
    assert looks_like_hidden_work(cand_event, cand_wall, ref_event, ref_wall) is flagged


def test_a_worker_low_on_thread_keys_is_replaced_after_its_job():
    # In a process of its own: the check must see the keys that imports and profiler sessions took for good.
    script = textwrap.dedent('''
        import ctypes
        from dice_copilot.validator import harness
        libc, key, taken = ctypes.CDLL(None), ctypes.c_uint(), []
        assert not harness.thread_keys_running_out()
        while libc.pthread_key_create(ctypes.byref(key), None) == 0:
            taken.append(key.value)
        for value in taken[:10]:
            libc.pthread_key_delete(ctypes.c_uint(value))
        assert harness.thread_keys_running_out()  # 10 left, fewer than the spare 64
        assert not harness.thread_keys_running_out(spare=10)  # and counting gave them all back
        print("ok")
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
