"""On a CUDA machine: the server's suggestions are checked numerically and timed, not just compiled; a wrong kernel is
rejected as incorrect; generation writes a correct ModelNew. Completions are scripted (known good and known wrong
kernels), the validator and the rest of the server are real. The CPU twin runs the same case with the GPU hidden, so
the CPU suite catches a setup that never reaches the validator (a prompt that does not fit, a script that does not
match) before the GPU run does. On failure both print what the server reported (statuses, logs, verdicts)."""

import pytest
from lsprotocol import types

from server_helpers import (DOUBLE_CORRECT, DOUBLE_WRONG, PY_STRING_HOLE, PY_WITH_STRING, REFERENCE_PY, execute,
                            inline_params, lsp_session, open_document, reference_infill_case, report_on_failure,
                            statuses, wait_ready)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.gpu
async def test_gpu_infill_is_checked_and_timed_and_generation_writes_a_correct_kernel(tmp_path, tmp_path_factory):
    case = reference_infill_case(tmp_path, tmp_path_factory)
    async with lsp_session(case.workspace, case.settings, case.env, hide_gpu=False) as client:
        with report_on_failure(client):
            status = await wait_ready(client)
            assert status["gpu"] is True and status["device"].startswith("cuda")
            uri = open_document(client, case.kernel_path, PY_WITH_STRING, "python")
            result = await client.text_document_inline_completion_async(
                inline_params(uri, *PY_STRING_HOLE, invoked=True))
            assert [item.insert_text for item in result.items] == [DOUBLE_CORRECT]  # the wrong one fails numerics
            verdict = result.items[0].command.arguments[0]["verdict"]
            assert verdict["compileOnly"] is False and verdict["stage"] in ("correct", "timed")
            assert verdict["maxAbsError"] is not None and verdict["maxAbsError"] < 1e-4
            assert statuses(client)[-1]["reason"] == "ok"

            reference_uri = open_document(client, case.workspace / "double.py", REFERENCE_PY, "python")
            generated = await execute(client, "diceCopilot.generateKernel", {"uri": reference_uri,
                                                                             "className": "Model"})
            assert generated["status"] == "ok" and generated["best"]["compileOnly"] is False
            target = case.workspace / "double_kernel_2.py"  # double_kernel.py exists already
            assert generated["best"]["uri"] == target.as_uri() and "class ModelNew" in target.read_text()
            reports = [r for rs in client.progress_reports.values() for r in rs
                       if isinstance(r, types.WorkDoneProgressReport)]
            assert any((r.message or "").startswith("checking numerics") for r in reports)


async def test_gpu_infill_case_reaches_the_validator_without_a_gpu(tmp_path, tmp_path_factory):
    """The GPU test's exact case with the GPU hidden: both scripted middles are spliced and compiled (compile-only
    verdicts, so both are shown); nothing is dropped before validation."""
    case = reference_infill_case(tmp_path, tmp_path_factory)
    async with lsp_session(case.workspace, case.settings, case.env) as client:
        with report_on_failure(client):
            await wait_ready(client)
            uri = open_document(client, case.kernel_path, PY_WITH_STRING, "python")
            result = await client.text_document_inline_completion_async(
                inline_params(uri, *PY_STRING_HOLE, invoked=True))
            assert sorted(item.insert_text for item in result.items) == sorted([DOUBLE_CORRECT, DOUBLE_WRONG])
            verdicts = [item.command.arguments[0]["verdict"] for item in result.items]
            assert all(v["passed"] and v["compileOnly"] and v["stage"] == "compile" for v in verdicts), verdicts
            assert statuses(client)[-1]["reason"] == "noGpu"
