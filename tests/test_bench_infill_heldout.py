"""bench/infill_heldout.py (infill on the held-out user-style set through the real server): every solution's
`__global__` bodies blank and restore exactly, each blanked file sits beside the reference the server finds, the
bench runs end to end on this CPU machine with the embedded default checkpoint, and a suggestion that only compiled
is counted as compile-checked, never as validated."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV
from dice_copilot.server.context import find_reference, kernel_at

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "infill_heldout.py"
sys.path.append(str(SCRIPT.parent))  # the bench imports its siblings as top-level modules
import infill_heldout  # noqa: E402
from server_latency import last_status, start_server, stop_server, wait_for_checkpoint  # noqa: E402

MANIFEST = {p["name"]: p for p in tomllib.loads((infill_heldout.SET / "manifest.toml").read_text())["problem"]}
PROBLEMS = infill_heldout.user_problems(infill_heldout.SET)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda problem: problem.name)
def test_every_kernel_body_of_a_solution_blanks_and_restores(problem):
    requests = infill_heldout.infill_requests(problem)
    assert [request.kernel for request in requests] == MANIFEST[problem.name]["kernels"]
    for request in requests:
        text, hole = infill_heldout.blanked(request)
        body = problem.solution[len(request.prefix):len(problem.solution) - len(request.suffix)]
        assert body.strip() and request.prefix + body + request.suffix == problem.solution
        assert text[:hole] + body + text[hole:] == problem.solution
        ast.parse(text)
        assert text[hole - 1] == "{" and text[hole] == "}"  # the signature and braces stay, the body goes
        assert kernel_at(text, hole, "python").kernel_name == request.kernel  # the server sees the hole in it


def test_each_blanked_solution_sits_beside_the_reference_the_server_finds(tmp_path):
    several = next(problem for problem in PROBLEMS if len(MANIFEST[problem.name]["kernels"]) > 2)
    requests = infill_heldout.infill_requests(several)
    paths = infill_heldout.write_workspace(requests, tmp_path)
    assert [path.name for path in paths] == ["problem_kernel.py"] + [
        f"problem_kernel_{n}.py" for n in range(2, len(requests) + 1)]
    for request, path in zip(requests, paths):
        assert path.read_text() == infill_heldout.blanked(request)[0]
        reference = find_reference(str(path), path.read_text(), "python")
        assert reference.path == str(tmp_path / several.name / "problem.py") and reference.class_name == "Model"


def test_the_bench_runs_end_to_end_on_the_cpu_with_the_embedded_default(tmp_path):
    out = tmp_path / "infill.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", DICE_COPILOT_CACHE=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--problems", "18", "29", "--max-new-tokens", "8", "--candidates", "2",
         "--per-problem", "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile-only: no CUDA device" in done.stdout and "(untrained)" in done.stdout
    report = json.loads(out.read_text())
    assert report["mode"] == "compile-only" and report["untrained"] is True and report["checkpoint"] == "default"
    kernels = [(name, kernel) for name in ("18_cumulative_mean_time", "29_swiglu_chunk_bf16")
               for kernel in MANIFEST[name]["kernels"]]
    assert [(row["problem"], row["kernel"]) for row in report["rows"]] == kernels
    assert report["requests"] == report["requests_total"] == len(kernels) and report["not_reached"] == 0
    assert report["validated"] == 0 and report["validated_share"] == 0  # compiled is never validated
    assert sum(report["reasons"].values()) == len(kernels)
    assert 0 < report["latency_s"]["p50"] <= report["latency_s"]["p95"]
    assert set(report["per_problem"]) == {name for name, _ in kernels}
    for row in report["rows"]:
        assert row["latency_s"] > 0 and row["reason"] and row["server_log"]
        assert row["compile_only"] is True and row["file"] == "problem_kernel.py"


@pytest.mark.slow
async def test_a_suggestion_that_only_compiled_counts_as_compile_checked_not_validated(tmp_path):
    # The server's test hook answers with the solution's own body: the bench drops the hook, so the request is
    # sent through the bench's own function to a server started here with it.
    problem = next(problem for problem in PROBLEMS if problem.name.startswith("18"))
    request = infill_heldout.infill_requests(problem)[0]
    body = problem.solution[len(request.prefix):len(problem.solution) - len(request.suffix)]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"infill": [{"when": request.kernel, "middles": [body]}]}))
    env = dict(os.environ, OMP_NUM_THREADS="1", DICE_COPILOT_CACHE=str(tmp_path / "cache"))
    env[SCRIPTED_COMPLETIONS_ENV] = str(script)
    path, = infill_heldout.write_workspace([request], tmp_path / "workspace")
    client = await start_server({"invokedBudgetMs": 600_000}, tmp_path / "workspace", env)
    try:
        await wait_for_checkpoint(client, 120)
        row = await infill_heldout.one_request(client, request, path, 1)
        machine = last_status(client)
    finally:
        await stop_server(client)
    assert row["items"] == 1 and row["compile_only"] is True and row["reason"] == "noGpu", row
    args = SimpleNamespace(checkpoint=None, device="auto", candidates=None, max_new_tokens=None, budget_s=600.0)
    report = infill_heldout.summary([request], [row], 1.0, machine, args)
    assert report["mode"] == "compile-only"
    assert report["validated"] == 0 and report["compile_checked_only"] == 1 and report["suggested_share"] == 1
    table = infill_heldout.table(report)
    assert "1/1 compile-checked" in table and "none counts as validated" in table
