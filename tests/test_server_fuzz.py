"""Robustness: a seeded fuzz session (random and out-of-range positions, malformed params, a 10 MB document, non-UTF-8
bytes on the wire, 1,000 requests with cancellations and edits) leaves the server alive, answering, with bounded
memory, and without writing any file."""

import asyncio
import itertools
import json
import random
from concurrent.futures import Future

import psutil
import pytest
from lsprotocol import types

from server_helpers import (PY_WITH_STRING, SCALE_CU, execute, inline_params, lsp_session, make_tiny_checkpoint,
                            open_document, shared_build_cache, wait_ready)
from dice_copilot.server.protocol import (ACCEPT_COMMAND, CANCEL_COMMAND, GENERATE_COMMAND, STATUS_COMMAND,
                                          VALIDATE_COMMAND)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REQUESTS = 1000


def snapshot(folder):
    return {path: path.stat().st_mtime_ns for path in folder.rglob("*")}


_raw_ids = itertools.count()


def send_raw(client, method: str, params, request: bool = True) -> Future | None:
    """Write a JSON-RPC message straight to the server's stdin (the typed client would refuse malformed params);
    the client still matches the response to the returned future."""
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    future = None
    if request:
        message["id"] = f"raw-{next(_raw_ids)}"
        future = Future()
        future.msg_id = message["id"]
        client.protocol._request_futures[message["id"]] = future
    body = json.dumps(message).encode()
    client._server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return future


def random_position(rng: random.Random) -> dict:
    return {"line": rng.choice([rng.randint(0, 40), rng.randint(0, 2**31 - 1), 0]),
            "character": rng.choice([rng.randint(0, 120), rng.randint(0, 2**31 - 1), 1])}


MALFORMED = [
    None, 5, "text", [], {}, {"textDocument": 5}, {"textDocument": {"uri": 7}, "position": "here"},
    {"textDocument": {"uri": "file:///nowhere.cu"}, "position": {"line": -1, "character": -9}},
    {"textDocument": {"uri": "not a uri"}, "position": {"line": 0, "character": 0}, "context": {"triggerKind": 99}},
]


async def test_fuzzed_session_leaves_the_server_alive_and_bounded(tmp_path, tmp_path_factory):
    rng = random.Random(20261130)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    checkpoint = make_tiny_checkpoint(tmp_path / "ck")
    settings = {"checkpoint": str(checkpoint), "maxCandidates": 1, "maxNewTokens": 4, "autoBudgetMs": 20}
    before_files = snapshot(workspace)
    env = {"DICE_COPILOT_CACHE": str(shared_build_cache(tmp_path_factory))}
    async with lsp_session(workspace, settings, env) as client:
        await wait_ready(client)
        server = psutil.Process(client._server.pid)
        documents = {
            "k.cu": (open_document(client, workspace / "k.cu", SCALE_CU, "cuda-cpp"), SCALE_CU),
            "s.py": (open_document(client, workspace / "s.py", PY_WITH_STRING, "python"), PY_WITH_STRING),
            "wide.cu": (open_document(client, workspace / "wide.cu", "__global__ void k() {\n  😀𝄞 é\u200b\n}\n",
                                      "cuda-cpp"), ""),
            "lone.cu": (open_document(client, workspace / "lone.cu", "__global__ void k() {\n  \udcff\udc80 x\n}\n",
                                      "cuda-cpp"), ""),
        }
        huge = "__global__ void big(float* x) {\n" + ("    x[0] += 1.0f;  // padding padding padding\n" * 220_000)
        documents["huge.cu"] = (open_document(client, workspace / "huge.cu", huge + "}\n", "cuda-cpp"), "")
        uris = [uri for uri, _ in documents.values()]
        baseline_rss = server.memory_info().rss
        versions = {uri: 1 for uri in uris}

        # Raw bytes that are not UTF-8, framed as a message: logged and skipped by the server.
        body = b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"x": "\xff\xfe\xc3"}}'
        client._server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

        pending = []
        for index in range(REQUESTS):
            uri = rng.choice(uris)
            roll = rng.random()
            position = random_position(rng)
            if roll < 0.45:
                trigger = rng.choice([1, 2])
                params = {"textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": trigger}}
                future = send_raw(client, "textDocument/inlineCompletion", params)
                pending.append(future)
                if rng.random() < 0.3:
                    client.cancel_request(types.CancelParams(id=future.msg_id))
            elif roll < 0.6:
                versions[uri] += 1
                start = random_position(rng) if rng.random() < 0.2 else {"line": rng.randint(0, 12),
                                                                           "character": rng.randint(0, 30)}
                send_raw(client, "textDocument/didChange", request=False, params={
                    "textDocument": {"uri": uri, "version": versions[uri]},
                    "contentChanges": [{"range": {"start": start, "end": start},
                                        "text": rng.choice(["x", "\n", "}", "{", "/*", "\"", "😀", "int i;\n"])}]})
            elif roll < 0.7:
                pending.append(send_raw(client, "textDocument/inlineCompletion", rng.choice(MALFORMED)))
            elif roll < 0.8:
                pending.append(send_raw(client, "textDocument/hover", {
                    "textDocument": {"uri": uri}, "position": position}))
            elif roll < 0.9:
                pending.append(send_raw(client, "textDocument/codeAction", {
                    "textDocument": {"uri": uri}, "range": {"start": position, "end": position},
                    "context": {"diagnostics": []}}))
            else:
                command = {"command": rng.choice([VALIDATE_COMMAND, GENERATE_COMMAND, CANCEL_COMMAND, ACCEPT_COMMAND])}
                arguments = rng.choice([None, [], [None], [42, 1], [{"uri": 3}], [{"uri": "file:///missing/x.py"}],
                                        [{"uri": "file:///missing/x.py", "position": "x"}], [{"verdict": []}], [{}]])
                if arguments is not None:  # None: the list left out
                    command["arguments"] = arguments
                pending.append(send_raw(client, "workspace/executeCommand", command))
            if index % 50 == 49:
                await asyncio.sleep(0.05)
        results = await asyncio.wait_for(asyncio.gather(*(asyncio.wrap_future(f) for f in pending),
                                                        return_exceptions=True), timeout=180)
        assert len(results) == len(pending)

        # Alive and answering: a status snapshot and a fast-path completion still work.
        status = await execute(client, STATUS_COMMAND)
        assert status["state"] in ("ready", "generating") and server.is_running()
        answer = await client.text_document_inline_completion_async(inline_params(documents["k.cu"][0], 0, 0))
        assert answer.items == ()
        assert server.memory_info().rss - baseline_rss < 400 * 2**20
        assert status["cacheEntries"] <= 100
    assert snapshot(workspace) == before_files  # no file written
