"""End-to-end tests of the language server process over LSP (pytest-lsp), with a tiny random checkpoint on the CPU and
the real validator in compile-only mode. Validated suggestions come from scripted completions (the tiny model writes
garbage); the garbage path is tested with the real model in test_server_lsp_model.py."""

import asyncio
import json
import time

import psutil
import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from server_helpers import (GOOD_MIDDLE, execute, shared_build_cache, PY_STRING_HOLE, PY_WITH_STRING, REFERENCE_PY, SCALE_CU, SCALE_CU_HOLE,
                            inline_params, lsp_session, make_tiny_checkpoint, open_document, statuses, wait_ready,
                            wait_until, write_script)
from dice_copilot.model.checkpoint import write_decoding_defaults
from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV
from dice_copilot.server.protocol import (ACCEPT_COMMAND, CANCEL_COMMAND, COMMANDS, GENERATE_COMMAND,
                                          GENERATION_UPDATE_NOTIFICATION, STATUS_COMMAND,
                                          SUGGESTION_READY_NOTIFICATION, VALIDATE_COMMAND)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow, pytest.mark.timeout(900)]

BAD_MIDDLE = "if (i < n) out[i] = undefined_symbol * 2.0f;"
PY_GOOD_MIDDLE = "if (i < n) out[i] = x[i] * 2.0f;"
SLOW_S = 1.5
# A body that nvcc needs seconds to compile (a fully unrolled loop of 4,096 steps: 7.8 s on this project's CPU
# machine), so that a superseding request always finds the compiler still running, on any machine.
SLOW_TO_COMPILE_MIDDLE = ("float kill_marker = x[i]; _Pragma(\"unroll\") for (int k = 0; k < 4096; ++k) "
                          "kill_marker = __sinf(kill_marker * (k + 1.5f)) + x[i + k]; out[i] = kill_marker;")
COMPILER_PROCESSES = {"nvcc", "cicc", "ptxas", "cudafe++", "gcc", "g++", "c++", "cc1plus"}


def generated_module() -> str:
    """The ModelNew a scripted generation returns: the Python-string file with its hole filled (same text as the
    Python-string infill candidate, so the validator's build cache compiles it once)."""
    lines = PY_WITH_STRING.split("\n")
    line, character = PY_STRING_HOLE
    lines[line] = lines[line][:character] + PY_GOOD_MIDDLE + lines[line][character:]
    return "\n".join(lines)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("lsp")
    workspace = root / "ws"
    workspace.mkdir()
    checkpoint = make_tiny_checkpoint(root / "checkpoint")
    # Decoding defaults of the checkpoint: the settings below leave the threshold unset and set maxCandidates.
    write_decoding_defaults(checkpoint, {"threshold": 0.95, "num_return_sequences": 3})
    script = write_script(root / "script.json", infill=[
        {"when": "scale_kernel", "middles": [GOOD_MIDDLE, BAD_MIDDLE], "delayS": SLOW_S},
        {"when": "double_kernel", "middles": [PY_GOOD_MIDDLE]},
        {"when": "// version-a", "middles": [""], "delayS": 30},
        {"when": "// version-b", "middles": [""]},
        {"when": "// cancel-me", "middles": [""], "delayS": SLOW_S},
        {"when": "// kill-me", "middles": [SLOW_TO_COMPILE_MIDDLE]},
    ], kernel=[{"when": "class Model", "modules": ["not python at all", generated_module()]}])
    settings = {"checkpoint": str(checkpoint), "autoBudgetMs": 300, "invokedBudgetMs": 600_000,
                "maxCandidates": 2, "maxNewTokens": 32, "validation": {"timeoutS": 600}}
    env = {SCRIPTED_COMPLETIONS_ENV: str(script), "DICE_COPILOT_CACHE": str(shared_build_cache(tmp_path_factory))}
    async with lsp_session(workspace, settings, env) as client:
        await wait_ready(client)
        yield client, workspace


def log_text(client) -> str:
    return "\n".join(message.message for message in client.log_messages)


async def test_capabilities(session):
    client, _ = session
    capabilities = client.init_result.capabilities
    assert capabilities.inline_completion_provider is not None
    assert list(capabilities.code_action_provider.code_action_kinds) == [types.CodeActionKind.RefactorRewrite]
    assert capabilities.code_lens_provider is not None and capabilities.hover_provider
    assert set(capabilities.execute_command_provider.commands) == set(COMMANDS)
    status = await execute(client, STATUS_COMMAND)
    assert status["loads"] == 1 and status["compileOnly"] is True and status["device"] == "cpu"
    decoding = status["decoding"]
    assert decoding["threshold"] == {"value": 0.95, "source": "checkpoint"}
    assert decoding["maxCandidates"] == {"value": 2, "source": "setting"}
    assert decoding["strategy"] == {"value": "dynamic", "source": "default"}


async def test_fast_path_empties_with_reasons(session):
    client, workspace = session
    uri = open_document(client, workspace / "fast.cu", SCALE_CU, "cuda-cpp")
    other = open_document(client, workspace / "notes.md", "__global__ void k() {\n\n}\n", "markdown")
    python = open_document(client, workspace / "plain.py", REFERENCE_PY, "python")
    cases = [(uri, 0, 0), (uri, 2, 0), (other, 1, 0), (python, 8, 8), (uri, 10_000, 10_000)]
    timings = []
    for target, line, character in cases * 5:
        started = time.perf_counter()
        result = await client.text_document_inline_completion_async(inline_params(target, line, character))
        timings.append(time.perf_counter() - started)
        assert result.items == ()
    timings.sort()
    assert timings[len(timings) // 2] < 0.05  # round trip incl. the client; the server side is well under 5 ms
    assert any(s.get("reason") == "notInKernel" for s in statuses(client))


async def test_infill_cu_budget_then_suggestion_ready_then_cache_hit(session):
    client, workspace = session
    path = workspace / "scale.cu"
    path.write_text(SCALE_CU)
    uri = open_document(client, path, SCALE_CU, "cuda-cpp")
    started = time.perf_counter()
    first = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE))
    assert first.items == () and time.perf_counter() - started < SLOW_S  # the automatic budget (300 ms) expired
    await wait_until(lambda: any(s.get("reason") == "timeout" for s in statuses(client)), 5, "timeout status")
    ready = await wait_until(lambda: [p for m, p in client.custom_notifications if m == SUGGESTION_READY_NOTIFICATION
                                      and p["uri"] == uri], 180, "suggestionReady")
    assert ready[0]["position"] == {"line": SCALE_CU_HOLE[0], "character": SCALE_CU_HOLE[1]}

    started = time.perf_counter()
    again = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE))
    assert time.perf_counter() - started < 0.2
    assert "cache hit" in log_text(client)
    assert [item.insert_text for item in again.items] == [GOOD_MIDDLE]  # the non-compiling candidate is not shown
    item = again.items[0]
    assert item.range.start == item.range.end == types.Position(*SCALE_CU_HOLE)
    assert item.command.command == ACCEPT_COMMAND
    verdict = item.command.arguments[0]["verdict"]
    assert verdict["passed"] and verdict["compileOnly"] and verdict["stage"] == "compile"
    assert statuses(client)[-1]["reason"] == "noGpu"

    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=item.command.command, arguments=item.command.arguments))
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(2, 20)))
    assert "scale_kernel" in hover.contents.value and "compiles" in hover.contents.value

    # type-through: the user types the first characters of the suggestion; the rest is served at once
    typed = GOOD_MIDDLE[:4]
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(*SCALE_CU_HOLE), types.Position(*SCALE_CU_HOLE)), text=typed)]))
    through = await client.text_document_inline_completion_async(
        inline_params(uri, SCALE_CU_HOLE[0], SCALE_CU_HOLE[1] + len(typed)))
    assert [i.insert_text for i in through.items] == [GOOD_MIDDLE[len(typed):]]


async def test_infill_in_python_cuda_string_invoked(session):
    client, workspace = session
    path = workspace / "double_op.py"
    path.write_text(PY_WITH_STRING)
    uri = open_document(client, path, PY_WITH_STRING, "python")
    result = await client.text_document_inline_completion_async(inline_params(uri, *PY_STRING_HOLE, invoked=True))
    assert [item.insert_text for item in result.items] == [PY_GOOD_MIDDLE], log_text(client)[-3000:]
    assert result.items[0].command.arguments[0]["verdict"]["compileOnly"] is True


async def test_supersession_cancels_the_older_job(session):
    client, workspace = session
    text_a = "// version-a\n" + SCALE_CU.replace("scale_kernel", "versioned_kernel")
    uri = open_document(client, workspace / "versioned.cu", text_a, "cuda-cpp")
    hole = (SCALE_CU_HOLE[0] + 1, SCALE_CU_HOLE[1])
    older = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, *hole,
                                                                                             invoked=True)))
    await wait_until(lambda: "denoising 2 candidate(s) for versioned_kernel" in log_text(client), 20, "job A")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(0, 3), types.Position(0, 12)), text="version-b")]))
    newer = await client.text_document_inline_completion_async(inline_params(uri, *hole, invoked=True))
    assert (await asyncio.wait_for(older, 10)).items == ()  # returned long before its 30 s script delay
    assert newer.items == ()  # version-b scripts an empty middle
    assert any(s.get("reason") == "superseded" for s in statuses(client))
    assert "superseded" in log_text(client)


async def test_cancel_request_only_stops_waiting(session):
    client, workspace = session
    text = "// cancel-me\n" + SCALE_CU.replace("scale_kernel", "cancelled_kernel")
    uri = open_document(client, workspace / "cancel.cu", text, "cuda-cpp")
    hole = (SCALE_CU_HOLE[0] + 1, SCALE_CU_HOLE[1])
    params = inline_params(uri, *hole, invoked=True)
    pending = client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id="cancel-me-1")
    await asyncio.sleep(0.3)
    client.cancel_request(types.CancelParams(id="cancel-me-1"))
    with pytest.raises(JsonRpcException) as error:
        await asyncio.wait_for(asyncio.wrap_future(pending), 10)
    assert error.value.code == -32800
    assert "the job keeps running" in log_text(client)
    await wait_until(lambda: "distinct splice" in log_text(client).split("cancelled_kernel")[-1], 20,
                     "the job to finish after the cancel")
    started = time.perf_counter()
    await client.text_document_inline_completion_async(params)
    assert time.perf_counter() - started < 0.2
    assert "cache hit" in [m.message for m in client.log_messages if m.message.startswith("inline completion")][-1]


async def test_superseding_kills_validation_subprocesses(session):
    client, workspace = session
    text = "// kill-me\n" + SCALE_CU.replace("scale_kernel", "killed_kernel")
    uri = open_document(client, workspace / "kill.cu", text, "cuda-cpp")
    hole = (SCALE_CU_HOLE[0] + 1, SCALE_CU_HOLE[1])
    worker = (await execute(client, STATUS_COMMAND))["validationWorkerPid"]
    first = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, *hole,
                                                                                             invoked=True)))
    # The log says the first job is validating and a compiler runs under the worker (a compiler alone proves
    # nothing: the worker's warm-up compiles in the background, even before the first request is sent).
    await wait_until(lambda: "killed_kernel" in log_text(client) and "validating 1 candidate(s) together" in log_text(
        client).split("killed_kernel")[-1] and compiler_running_under(worker), 60, "the first job's compile")
    await client.text_document_inline_completion_async(inline_params(uri, hole[0] - 1, 4))  # another spot
    assert (await asyncio.wait_for(first, 10)).items == ()
    await wait_until(lambda: "killed validation worker pid" in log_text(client), 10, "the worker kill")
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
    assert (await execute(client, STATUS_COMMAND))["validationWorkerKills"] >= 1


def compiler_running_under(pid: int) -> bool:
    try:
        return any(child.name() in COMPILER_PROCESSES for child in psutil.Process(pid).children(recursive=True))
    except psutil.Error:  # a child that ended between the listing and its name
        return False


async def test_code_action_generates_a_new_kernel_file(session):
    client, workspace = session
    source = workspace / "scale.py"
    source.write_text(REFERENCE_PY)
    (workspace / "scale_kernel.py").write_text("# the user's own file: must not be overwritten\n")
    uri = open_document(client, source, REFERENCE_PY, "python")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(types.Position(4, 0),
                                                                                types.Position(4, 5)),
        context=types.CodeActionContext(diagnostics=[])))
    assert len(actions) == 1  # lsprotocol's converter reads any object with a "command" key as a Command
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert [lens.command.arguments[0]["className"] for lens in lenses] == ["Model"]
    command = lenses[0].command

    result = await execute(client, command.command, *command.arguments)
    assert result["status"] == "ok", result
    target = workspace / "scale_kernel_2.py"
    assert result["best"]["uri"] == target.as_uri()
    assert (workspace / "scale_kernel.py").read_text().startswith("# the user's own file")
    assert "class ModelNew" in target.read_text()
    edit = client.applied_edits[-1].edit.document_changes
    assert isinstance(edit[0], types.CreateFile) and edit[0].options.overwrite is False
    assert client.shown_documents[-1].uri == target.as_uri()
    updates = [p for m, p in client.custom_notifications if m == GENERATION_UPDATE_NOTIFICATION]
    assert {(u["candidate"], u["status"]) for u in updates} >= {(1, "failed"), (2, "generated"), (2, "passed")}
    reports = [r for token, rs in client.progress_reports.items() for r in rs]
    messages = [getattr(r, "message", None) or "" for r in reports]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and any("denoising" in m for m in messages)
    assert any(m.startswith("compiling 1/1") for m in messages) and isinstance(reports[-1], types.WorkDoneProgressEnd)


async def test_generate_without_inputs_says_what_is_needed(session):
    client, workspace = session
    text = REFERENCE_PY.split("def get_inputs")[0]
    uri = open_document(client, workspace / "no_inputs.py", text, "python")
    with pytest.raises(JsonRpcException) as error:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=GENERATE_COMMAND, arguments=[{"uri": uri, "className": "Model"}]))
    assert "get_inputs()" in str(error.value) and "Model.forward" in str(error.value)
    assert not list(workspace.glob("no_inputs_kernel*.py"))


async def test_validate_kernel_publishes_diagnostics_at_the_right_lines(session):
    client, workspace = session
    broken = SCALE_CU.replace("int i = blockIdx.x", "int i = no_such_variable + blockIdx.x")
    path = workspace / "broken.cu"
    path.write_text(broken)
    uri = open_document(client, path, broken, "cuda-cpp")
    result = await execute(client, VALIDATE_COMMAND, {"uri": uri})
    assert result["verdict"]["passed"] is False
    diagnostics = client.diagnostics[uri]
    assert diagnostics and diagnostics[0].range.start.line == 3 and "no_such_variable" in diagnostics[0].message

    # A syntax error (not an unknown name, which the validator rechecks in the slow load_inline layout).
    py_broken = PY_WITH_STRING.replace("int i = blockIdx.x * blockDim.x", "int i = blockIdx.x * ;")
    py_path = workspace / "broken_string.py"
    py_path.write_text(py_broken)
    py_uri = open_document(client, py_path, py_broken, "python")
    await execute(client, VALIDATE_COMMAND, {"uri": py_uri})
    errors = [d for d in client.diagnostics[py_uri] if d.severity == types.DiagnosticSeverity.Error]
    assert errors and {d.range.start.line for d in errors} == {8}  # the line inside the Python string
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(4, 4)))
    assert "✗" in hover.contents.value


async def test_malformed_command_arguments_get_a_clear_error(session):
    client, _ = session
    with pytest.raises(JsonRpcException) as error:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=GENERATE_COMMAND, arguments=[42]))
    assert "uri" in str(error.value)
    cancelled = await execute(client, CANCEL_COMMAND, {"jobId": "job-does-not-exist"})
    assert cancelled["cancelled"] == []
    assert json.dumps(statuses(client))  # every status payload is plain JSON


async def test_command_arguments_are_typed_and_a_bad_one_is_named(session):
    """Each command's argument is structured from its type (server/protocol.py): a wrong type, a missing field or a
    missing argument answers Invalid Params naming the command and the field; unknown keys are ignored."""
    client, workspace = session
    bad = [
        (GENERATE_COMMAND, [{"uri": 3}], "expected str @ $.uri"),
        (GENERATE_COMMAND, [{"uri": "file:///x.py", "position": {"line": "one"}}], "$.position.line"),
        (VALIDATE_COMMAND, [{}], "required field missing @ $.uri"),
        (VALIDATE_COMMAND, [], "Expected 1 arguments, got 0"),
        (VALIDATE_COMMAND, None, "Expected 1 arguments, got 0"),  # no argument list at all
        (CANCEL_COMMAND, [{"jobId": 7}], "$.jobId"),
        (ACCEPT_COMMAND, ["the item"], "takes one object argument {id?, uri?, kernel?, verdict?}, got 'the item'"),
        (ACCEPT_COMMAND, [{"verdict": {"passed": "yes"}}], "expected bool @ $.verdict.passed"),
    ]
    for command, arguments, expected in bad:
        with pytest.raises(JsonRpcInvalidParams) as error:
            await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command,
                                                                                    arguments=arguments))
        assert expected in str(error.value), (command, arguments, str(error.value))
        if arguments and isinstance(arguments[0], dict):
            assert command in str(error.value)

    # An unknown key (the Neovim plugin sends the cursor to validateKernel) is ignored: the URI is what is checked.
    with pytest.raises(JsonRpcInvalidParams, match="neither open in the editor nor a readable file"):
        await execute(client, VALIDATE_COMMAND, {"uri": (workspace / "missing.cu").as_uri(), "position": {
            "line": 0, "character": 0}})
    assert (await execute(client, STATUS_COMMAND, {}))["loads"] == 1  # showStatus takes nothing or {}

    # An accepted suggestion's verdict, typed, is what the hover of its kernel shows.
    source = SCALE_CU.replace("scale_kernel", "accepted_kernel")
    uri = open_document(client, workspace / "accepted.cu", source, "cuda-cpp")
    assert await execute(client, ACCEPT_COMMAND, {
        "id": "s-accepted", "uri": uri, "kernel": "accepted_kernel", "verdict": {
            "passed": True, "stage": "compile", "compileOnly": True, "speedup": None, "maxAbsError": None,
            "failure": None, "failureCode": None, "notRun": "no CUDA device"}}) is None
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(4, 4)))
    assert "last verdict: ✓ compiles (no CUDA device)" in hover.contents.value


async def test_settings_are_pulled_after_did_change_configuration(session):
    client, workspace = session
    uri = open_document(client, workspace / "settings.cu", SCALE_CU.replace("scale_kernel", "settings_kernel"),
                        "cuda-cpp")
    settings = client.get_configuration(section="diceCopilot")
    client.set_configuration({"diceCopilot": {**settings, "autoTrigger": False}})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_until(lambda: "settings updated from workspace/configuration" in log_text(client), 10, "the pull")
    result = await client.text_document_inline_completion_async(inline_params(uri, *SCALE_CU_HOLE))
    assert result.items == () and statuses(client)[-1]["reason"] == "autoTriggerOff"
    client.set_configuration({"diceCopilot": settings})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
