"""End-to-end tests with the real tiny model (no scripted completions): checkpoint errors and loading, hot reload of
a checkpoint folder rewritten on disk, and garbage from an untrained model never shown as a suggestion."""

import shutil

import pytest
from lsprotocol import types

from server_helpers import (SCALE_CU, SCALE_CU_HOLE, execute, inline_params, lsp_session, make_tiny_checkpoint,
                            open_document, shared_build_cache, statuses, wait_ready,
                            wait_until)
from dice_copilot.model.checkpoint import write_decoding_defaults

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_checkpoint_errors_loading_hot_reload_and_garbage_not_shown(tmp_path, tmp_path_factory):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    checkpoint = make_tiny_checkpoint(tmp_path / "ck", seed=0)
    missing = tmp_path / "no-such-checkpoint"
    settings = {"checkpoint": str(missing), "maxCandidates": 2, "maxNewTokens": 16, "invokedBudgetMs": 120_000}
    env = {"DICE_COPILOT_CACHE": str(shared_build_cache(tmp_path_factory))}
    async with lsp_session(workspace, settings, env) as client:
        uri = open_document(client, workspace / "scale.cu", SCALE_CU, "cuda-cpp")

        # A missing checkpoint: requests answer empty at once, and say why.
        await wait_until(lambda: any(s.get("reason") == "checkpointError" for s in statuses(client)), 60,
                         "checkpointError status")
        result = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE))
        assert result.items == () and statuses(client)[-1]["reason"] == "checkpointError"
        assert str(missing) in statuses(client)[-1]["message"]

        # Pointing the setting at a real checkpoint loads it; a request during the load says modelLoading.
        settings = {**settings, "checkpoint": str(checkpoint)}
        client.set_configuration({"diceCopilot": settings})
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diceCopilot": settings}))
        result = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE))
        assert result.items == () and statuses(client)[-1]["reason"] == "modelLoading"
        first = await wait_ready(client, loads=1)
        assert first["untrained"] is False and statuses(client)[-1]["untrained"] is False
        load_titles = [r.title for reports in client.progress_reports.values() for r in reports
                       if isinstance(r, types.WorkDoneProgressBegin)]
        assert "Loading checkpoint" in load_titles

        # The untrained model writes garbage: nothing is shown, and the status says why.
        result = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE, invoked=True))
        assert result.items == ()
        assert statuses(client)[-1]["reason"] in ("validationFailed", "compileError")

        # A training run replaces the checkpoint folder: the server reloads it in the background. Its model card
        # says untrained, and so does every status from then on; its decoding defaults apply where no setting is.
        assert first["decoding"]["strategy"] == {"value": "dynamic", "source": "default"}
        staging = make_tiny_checkpoint(tmp_path / "staging", seed=1)
        (staging / "README.md").write_text("# tiny DICE (untrained)\n\nRandom weights for plumbing tests.\n")
        write_decoding_defaults(staging, {"strategy": "static", "num_return_sequences": 4})
        shutil.rmtree(checkpoint)
        staging.rename(checkpoint)
        second = await wait_ready(client, timeout=60, loads=2)
        assert second["checkpointId"] != first["checkpointId"]
        assert second["untrained"] is True and statuses(client)[-1]["untrained"] is True
        assert second["decoding"]["strategy"] == {"value": "static", "source": "checkpoint"}
        assert second["decoding"]["maxCandidates"] == {"value": 2, "source": "setting"}

        # A broken write keeps the old model serving and reports why.
        (checkpoint / "config.json").write_text("{ not json")
        await wait_until(lambda: [s for s in statuses(client)[-3:] if s.get("reason") == "checkpointError"], 60,
                         "a checkpointError status after the broken write")
        assert "config.json" in statuses(client)[-1]["message"]
        status = await execute(client, "diceCopilot.showStatus")
        assert status["loads"] == 2 and status["state"] == "ready" and status["checkpointId"] == second["checkpointId"]
        assert any("still serving" in message.message for message in client.messages)
        result = await client.text_document_inline_completion_async(inline_params(uri, 0, 0))
        assert statuses(client)[-1]["reason"] == "notInKernel"  # still serving: not modelLoading
