"""The server tells editors when the checkpoint serving is untrained: `untrained` in every diceCopilot/status and in
showStatus, for the embedded default (marked in its config.json), a clean checkpoint, and one whose model card
(README.md) is rewritten to say untrained while the server runs (a hot reload)."""

import pytest
from lsprotocol import types

from server_helpers import execute, lsp_session, make_tiny_checkpoint, statuses, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def last_ready(client) -> dict:
    return [status for status in statuses(client) if status["state"] == "ready"][-1]


async def test_status_and_show_status_carry_the_untrained_mark(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    checkpoint = make_tiny_checkpoint(tmp_path / "ck")
    settings = {"device": "cpu"}
    async with lsp_session(workspace, settings) as client:
        default = await wait_ready(client)
        assert default["checkpoint"] == "default" and default["untrained"] is True
        assert last_ready(client)["untrained"] is True and "UNTRAINED" in last_ready(client)["message"]
        assert all("untrained" in status for status in statuses(client))

        settings = {**settings, "checkpoint": str(checkpoint)}
        client.set_configuration({"diceCopilot": settings})
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diceCopilot": settings}))
        clean = await wait_ready(client, loads=2)
        assert clean["untrained"] is False and last_ready(client)["untrained"] is False
        assert "UNTRAINED" not in last_ready(client)["message"]

        (checkpoint / "README.md").write_text("# tiny DICE (untrained)\n\nRandom weights for plumbing tests.\n")
        carded = await wait_ready(client, loads=3)
        assert carded["untrained"] is True and last_ready(client)["untrained"] is True
        assert (await execute(client, "diceCopilot.showStatus"))["untrained"] is True
