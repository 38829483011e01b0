"""On a CUDA machine: the server's suggestions are checked numerically and timed, not just compiled; a wrong kernel is
rejected as incorrect; generation writes a correct ModelNew. Completions are scripted (known good and known wrong
kernels), the validator and the rest of the server are real."""

import pytest
from lsprotocol import types

from server_helpers import (PY_STRING_HOLE, PY_WITH_STRING, REFERENCE_PY, execute, inline_params, lsp_session,
                            make_tiny_checkpoint, open_document, shared_build_cache, statuses, wait_ready,
                            write_script)
from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(900)]

CORRECT = "if (i < n) out[i] = x[i] * 2.0f;"
WRONG = "if (i < n) out[i] = x[i] * 3.0f;"


async def test_gpu_infill_is_checked_and_timed_and_generation_writes_a_correct_kernel(tmp_path, tmp_path_factory):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "double.py").write_text(REFERENCE_PY)  # the sibling reference of double_kernel.py
    kernel_path = workspace / "double_kernel.py"
    kernel_path.write_text(PY_WITH_STRING)
    filled = PY_WITH_STRING.split("\n")
    line, character = PY_STRING_HOLE
    filled[line] = filled[line][:character] + CORRECT + filled[line][character:]
    script = write_script(tmp_path / "script.json", infill=[{"when": "double_kernel", "middles": [WRONG, CORRECT]}],
                          kernel=[{"when": "class Model", "modules": ["\n".join(filled)]}])
    settings = {"checkpoint": str(make_tiny_checkpoint(tmp_path / "ck")), "invokedBudgetMs": 600_000,
                "maxCandidates": 2, "validation": {"timeoutS": 600}}
    env = {SCRIPTED_COMPLETIONS_ENV: str(script), "DICE_COPILOT_CACHE": str(shared_build_cache(tmp_path_factory))}
    async with lsp_session(workspace, settings, env, hide_gpu=False) as client:
        status = await wait_ready(client)
        assert status["gpu"] is True and status["device"].startswith("cuda")
        uri = open_document(client, kernel_path, PY_WITH_STRING, "python")
        result = await client.text_document_inline_completion_async(inline_params(uri, *PY_STRING_HOLE, invoked=True))
        assert [item.insert_text for item in result.items] == [CORRECT]  # the wrong kernel fails the numeric check
        verdict = result.items[0].command.arguments[0]["verdict"]
        assert verdict["compileOnly"] is False and verdict["stage"] in ("correct", "timed")
        assert verdict["maxAbsError"] is not None and verdict["maxAbsError"] < 1e-4
        assert statuses(client)[-1]["reason"] == "ok"

        reference_uri = open_document(client, workspace / "double.py", REFERENCE_PY, "python")
        generated = await execute(client, "diceCopilot.generateKernel", {"uri": reference_uri, "className": "Model"})
        assert generated["status"] == "ok" and generated["best"]["compileOnly"] is False
        target = workspace / "double_kernel_2.py"  # double_kernel.py exists already
        assert generated["best"]["uri"] == target.as_uri() and "class ModelNew" in target.read_text()
        reports = [r for rs in client.progress_reports.values() for r in rs if isinstance(r, types.WorkDoneProgressReport)]
        assert any((r.message or "").startswith("checking numerics") for r in reports)
