"""Helpers for the language-server end-to-end tests: a tiny random checkpoint, a scripted-completions file, and a
pytest-lsp client talking to the real server process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV
from model_helpers import TOKENIZER_CORPUS


def make_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A random DICE model of the "tiny" preset with a small BPE tokenizer, saved in the HF layout the server loads."""
    import torch

    from dice_copilot.model import save
    from dice_copilot.model.config import DiceConfig
    from dice_copilot.model.network import DiceForBlockDiffusion
    from dice_copilot.model.tokenizer import DiceTokenizer
    from dice_copilot.trainer.tokenizer_training import train_tokenizer

    tokenizer_dir = folder.parent / f".{folder.name}-tokenizer"
    train_tokenizer(TOKENIZER_CORPUS, 300, tokenizer_dir)
    mask_id = json.loads((tokenizer_dir / "tokenizer.json").read_text())["added_tokens"]
    mask_id = next(token["id"] for token in mask_id if token["content"] == "<|MASK|>")
    tokenizer = DiceTokenizer.from_dir(tokenizer_dir, mask_token_id=mask_id)
    torch.manual_seed(seed)
    model = DiceForBlockDiffusion(DiceConfig.from_name("tiny", mask_token_id=mask_id))
    save(model, tokenizer, folder)
    return folder


# A kernel file pair the tests share: a reference module and a .cu file with a hole in its body.
REFERENCE_PY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales its input by two."""

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
'''

SCALE_CU = '''#include <cuda_runtime.h>

__global__ void scale_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    
}
'''
SCALE_CU_HOLE = (4, 4)  # line, character of the cursor inside the body

GOOD_MIDDLE = "if (i < n) out[i] = x[i] * 2.0f;"

PY_WITH_STRING = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

__global__ void double_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    
}

torch::Tensor double_it(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    double_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

cpp_source = "torch::Tensor double_it(torch::Tensor x);"

double_ext = load_inline(name="double_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                         functions=["double_it"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return double_ext.double_it(x)
'''
PY_STRING_HOLE = (9, 4)


# The GPU infill test's case (test_server_gpu.py): `double_kernel.py` with a hole, its sibling reference `double.py`,
# and two scripted middles, the wrong one first.
DOUBLE_CORRECT = "if (i < n) out[i] = x[i] * 2.0f;"
DOUBLE_WRONG = "if (i < n) out[i] = x[i] * 3.0f;"


@dataclass
class ReferenceInfillCase:
    workspace: Path
    kernel_path: Path
    filled: str  # the kernel file with DOUBLE_CORRECT in its hole
    settings: dict
    env: dict


def reference_infill_case(tmp_path: Path, tmp_path_factory) -> ReferenceInfillCase:
    """The workspace, script and settings of the GPU infill test, shared with its CPU twin so that the CPU suite
    catches a setup that can never reach the validator.

    The infill prompt carries the instructions and the reference module. With the tiny checkpoint's 300-token
    tokenizer they take ~3,700 of its 4,096 positions: the default 512-token answer budget does not fit at all
    (promptTooLong, an empty answer on any machine), and even a small one leaves room for only a few lines of the
    cursor's context. So maxNewTokens is small, and the scripted entry keys on `double_it`, which stays in the
    trimmed suffix (`double_kernel` is trimmed away)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "double.py").write_text(REFERENCE_PY)  # the sibling reference of double_kernel.py
    kernel_path = workspace / "double_kernel.py"
    kernel_path.write_text(PY_WITH_STRING)
    filled = PY_WITH_STRING.split("\n")
    line, character = PY_STRING_HOLE
    filled[line] = filled[line][:character] + DOUBLE_CORRECT + filled[line][character:]
    filled = "\n".join(filled)
    script = write_script(tmp_path / "script.json",
                          infill=[{"when": "double_it", "middles": [DOUBLE_WRONG, DOUBLE_CORRECT]}],
                          kernel=[{"when": "class Model", "modules": [filled]}])
    settings = {"checkpoint": str(make_tiny_checkpoint(tmp_path / "ck")), "invokedBudgetMs": 600_000,
                "maxCandidates": 2, "maxNewTokens": 32, "validation": {"timeoutS": 600}}
    env = {SCRIPTED_COMPLETIONS_ENV: str(script), "DICE_COPILOT_CACHE": str(shared_build_cache(tmp_path_factory))}
    return ReferenceInfillCase(workspace, kernel_path, filled, settings, env)


def session_report(client) -> str:
    """What the server told the client (status notifications, window/logMessage, window/showMessage, progress), for
    a failing end-to-end test to print: the server logs every verdict and every reason it answers empty."""
    parts = ["== diceCopilot/status =="]
    parts += [json.dumps(status, default=str) for status in statuses(client)]
    parts.append("== window/logMessage ==")
    parts += [message.message for message in client.log_messages]
    parts.append("== window/showMessage ==")
    parts += [message.message for message in client.messages]
    parts.append("== $/progress ==")
    parts += [f"{token}: {getattr(report, 'message', None) or getattr(report, 'title', '')}"
              for token, reports in client.progress_reports.items() for report in reports]
    return "\n".join(parts)


@contextlib.contextmanager
def report_on_failure(client):
    """Print `session_report` when the block fails (pytest shows it under "Captured stdout call")."""
    try:
        yield
    except BaseException:
        print(session_report(client))
        raise


def shared_build_cache(tmp_path_factory) -> Path:
    """One validator build cache for every server test of a pytest run: a candidate compiled by one test is a
    cache hit in the others (compiles dominate the CPU time of these tests)."""
    folder = tmp_path_factory.getbasetemp() / "server-build-cache"
    folder.mkdir(exist_ok=True)
    return folder


def write_script(path: Path, infill: list[dict] | None = None, kernel: list[dict] | None = None) -> Path:
    path.write_text(json.dumps({"infill": infill or [], "kernel": kernel or []}))
    return path


def capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities (work-done progress, showDocument, applyEdit with resource operations)."""
    return client_capabilities("visual-studio-code")


@contextlib.asynccontextmanager
async def lsp_session(workspace: Path, settings: dict, env: dict | None = None, apply_edits: bool = True,
                      hide_gpu: bool = True):
    """A client connected to `python -m dice_copilot.server` with `settings` (initializationOptions and
    workspace/configuration). With `apply_edits` the client applies workspace edits to disk like an editor. With
    `hide_gpu` the server sees no CUDA device (compile-only verdicts), so CPU tests behave the same on a GPU host."""
    hidden = {"CUDA_VISIBLE_DEVICES": ""} if hide_gpu else {}
    config = ClientServerConfig(server_command=[sys.executable, "-m", "dice_copilot.server"],
                                server_env={**os.environ, "DICE_COPILOT_RELOAD_DEBOUNCE_S": "0.3", **hidden,
                                            **(env or {})})
    client = await config.start()
    client.applied_edits = []
    client.set_configuration({"diceCopilot": settings})
    record_custom_notifications(client)

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        client.applied_edits.append(params)
        if not apply_edits:
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="test client refuses")
        created: dict[str, str] = {}
        for change in params.edit.document_changes or []:
            if isinstance(change, types.CreateFile):
                target = Path(change.uri.removeprefix("file://"))
                if target.exists():
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason="exists")
                created[change.uri] = ""
            elif isinstance(change, types.TextDocumentEdit):
                text = created.get(change.text_document.uri, "")
                for edit in change.edits:
                    text = edit.new_text + text
                created[change.text_document.uri] = text
        for uri, text in created.items():
            Path(uri.removeprefix("file://")).write_text(text)
        return types.ApplyWorkspaceEditResult(applied=True)

    client.init_result = await client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), initialization_options={"settings": settings},
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="ws")]))
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), timeout=10)
        await client.stop()


def statuses(client) -> list[dict]:
    """Every diceCopilot/status payload received so far, as dicts."""
    return [_as_dict(params) for method, params in client.custom_notifications if method == "diceCopilot/status"]


def _as_dict(value):
    if hasattr(value, "_asdict"):
        return {key: _as_dict(item) for key, item in value._asdict().items()}
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return [_as_dict(item) for item in value]
    if hasattr(value, "__dict__"):
        return {key: _as_dict(item) for key, item in vars(value).items()}
    return value


def record_custom_notifications(client, methods: tuple[str, ...] = (
        "diceCopilot/status", "diceCopilot/suggestionReady", "diceCopilot/generationUpdate")) -> None:
    """Keep every custom notification in `client.custom_notifications` as (method, params)."""
    client.custom_notifications = []
    for method in methods:
        def handler(params, method=method):
            client.custom_notifications.append((method, _as_dict(params)))
        client.feature(method)(handler)


async def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def execute(client, command: str, *arguments):
    """workspace/executeCommand, result as plain JSON."""
    return _as_dict(await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=command, arguments=list(arguments))))


async def wait_ready(client, timeout: float = 60.0, loads: int = 1) -> dict:
    """Wait until the server has loaded `loads` checkpoints."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await execute(client, "diceCopilot.showStatus")
        if status["loads"] >= loads:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError("the server did not load its checkpoint in time")


def open_document(client, path: Path, text: str, language_id: str, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=uri, language_id=language_id, version=version, text=text)))
    return uri


def inline_params(uri: str, line: int, character: int, invoked: bool = False) -> types.InlineCompletionParams:
    kind = types.InlineCompletionTriggerKind.Invoked if invoked else types.InlineCompletionTriggerKind.Automatic
    return types.InlineCompletionParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                        position=types.Position(line, character),
                                        context=types.InlineCompletionContext(trigger_kind=kind))
