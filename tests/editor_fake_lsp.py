"""A scripted stand-in for `dice-copilot serve` that speaks the same diceCopilot protocol, for testing the editor
plugins' own logic (ghost text fallback, partial accepts, cycling, suggestionReady, generate → applyEdit → open)
fast and deterministically. Every message it receives is appended to a JSONL log the tests read.

Usage: python editor_fake_lsp.py SCRIPT.json, where the script is
`{"log": path, "items": [full texts], "anchor": [line, character], "delay_first": bool, "loading_s": float,
"kernel": module text, "untrained": bool}`: inline answers are the items minus what was already typed since `anchor`
(a type-through cache in miniature); for `loading_s` after `initialized` the "model" loads and inline answers are
empty; `untrained` is what every status and showStatus say of the "checkpoint" once it has loaded.
"""

from __future__ import annotations

import sys

if "--help" in sys.argv:  # as `dice-copilot serve --help`, which :checkhealth runs: answered before the slow imports
    print(__doc__)
    sys.exit(0)

import asyncio  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from lsprotocol import types  # noqa: E402
from pygls.lsp.server import LanguageServer  # noqa: E402

COMMANDS = ["diceCopilot.didAccept", "diceCopilot.generateKernel", "diceCopilot.validateKernel",
            "diceCopilot.cancelJob", "diceCopilot.showStatus"]

script = json.loads(Path(sys.argv[1]).read_text())
server = LanguageServer("fake-dice-copilot", "0")
answered_once: set[tuple[str, int]] = set()  # (uri, line) asked once (delay_first)
announced: set[tuple[str, int]] = set()  # (uri, line) whose suggestionReady went out
model_ready = asyncio.Event()


def notify_status(ls: LanguageServer, state: str, message: str, **fields) -> None:
    untrained = bool(script.get("untrained")) and model_ready.is_set()
    ls.protocol.notify("diceCopilot/status", {"state": state, "message": message, "gpu": False,
                                              "untrained": untrained, **fields})


def record(kind: str, **data) -> None:
    with open(script["log"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"kind": kind, **data}) + "\n")


def typed_since_anchor(uri: str, position: types.Position) -> str:
    lines = server.workspace.get_text_document(uri).lines
    line, character = script["anchor"]
    if (position.line, position.character) < (line, character):
        return "\0"  # before the anchor: matches no item
    if position.line == line:
        return lines[line][character:position.character]
    rest = [lines[line][character:], *lines[line + 1:position.line], lines[position.line][:position.character]]
    return "".join(rest)  # pygls keeps each line's "\n"


def items_at(uri: str, position: types.Position) -> list[types.InlineCompletionItem]:
    typed = typed_since_anchor(uri, position)
    texts = [text[len(typed):] for text in script["items"] if text.startswith(typed) and len(text) > len(typed)]
    return [types.InlineCompletionItem(
        insert_text=text, range=types.Range(position, position),
        command=types.Command(title="accepted", command="diceCopilot.didAccept", arguments=[{
            "id": f"s{i}", "uri": "", "verdict": {"passed": True, "stage": "timed", "compileOnly": False,
                                                 "speedup": 2.4, "maxAbsError": 1e-6, "failure": None}}]))
        for i, text in enumerate(texts, 1)]


@server.feature(types.INITIALIZED)
async def initialized(ls: LanguageServer, params: types.InitializedParams):
    notify_status(ls, "loadingModel", "loading")
    await asyncio.sleep(float(script.get("loading_s", 0)))
    model_ready.set()
    notify_status(ls, "ready", "model loaded")
    record("ready")


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(ls: LanguageServer, params: types.InlineCompletionParams):
    uri, position = params.text_document.uri, params.position
    record("inlineCompletion", line=position.line, character=position.character,
           trigger=int(params.context.trigger_kind))
    if not model_ready.is_set():
        return types.InlineCompletionList(items=[])
    key = (uri, position.line)
    if script.get("delay_first") and key not in announced:
        # Still working until suggestionReady has gone out: an earlier re-request (another trigger of the
        # plugin's) gets nothing either, so the suggestion can only come from the re-request it causes.
        if key in answered_once:
            return types.InlineCompletionList(items=[])
        answered_once.add(key)
        version = ls.workspace.get_text_document(uri).version

        async def ready_later():
            await asyncio.sleep(0.3)
            ls.protocol.notify("diceCopilot/suggestionReady", {
                "uri": uri, "version": version, "count": len(script["items"]),
                "position": {"line": position.line, "character": position.character}})
            announced.add(key)
            record("suggestionReady")

        asyncio.ensure_future(ready_later())
        notify_status(ls, "validating", "still working", reason="timeout", compileOnly=True)
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(items=items_at(uri, position))


@server.feature("diceCopilot/didPartiallyAcceptCompletion")
def partially_accepted(ls: LanguageServer, params):
    record("didPartiallyAccept", id=params.id, acceptedLength=params.acceptedLength)


@server.command("diceCopilot.didAccept")
def did_accept(ls: LanguageServer, *args):
    record("didAccept", id=args[0]["id"])


@server.command("diceCopilot.showStatus")
def show_status(ls: LanguageServer, *args):
    record("showStatus")
    return {"state": "ready", "message": "fake model ready", "checkpoint": "fake", "device": "cpu", "gpu": False,
            "compileOnly": True, "untrained": bool(script.get("untrained")), "loads": int(model_ready.is_set()),
            "jobs": []}


@server.command("diceCopilot.cancelJob")
def cancel_job(ls: LanguageServer, *args):
    job = args[0].get("jobId") if args else None
    record("cancelJob", jobId=job)
    return {"cancelled": [job] if job else []}


@server.command("diceCopilot.generateKernel")
async def generate_kernel(ls: LanguageServer, *args):
    spec = args[0]
    record("generateKernel", uri=spec["uri"], className=spec["className"])
    source = Path(ls.workspace.get_text_document(spec["uri"]).path)
    target = source.with_name(f"{source.stem}_kernel.py")
    notify_status(ls, "generating", "generating", jobId="job-1", compileOnly=True)
    ls.protocol.notify("diceCopilot/generationUpdate", {"jobId": "job-1", "candidate": 1, "total": 1,
                                                        "status": "passed", "stage": "timed", "speedup": 2.4,
                                                        "maxAbsError": 1e-6, "failure": None})
    edit = types.WorkspaceEdit(document_changes=[
        types.CreateFile(uri=target.as_uri(), options=types.CreateFileOptions(ignore_if_exists=True)),
        types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target.as_uri(), version=None),
            edits=[types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(0, 0)),
                                  new_text=script["kernel"])]),
    ])
    applied = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit))
    await ls.window_show_document_async(types.ShowDocumentParams(uri=target.as_uri(), take_focus=True))
    notify_status(ls, "ready", "done", reason="ok", compileOnly=True)
    return {"jobId": "job-1", "status": "ok" if applied.applied else "error", "message": f"wrote {target.name}",
            "best": {"uri": target.as_uri(), "speedup": 2.4, "maxAbsError": 1e-6, "compileOnly": False},
            "candidates": [{"index": 1, "passed": True, "stage": "timed", "failure": None, "speedup": 2.4}]}


if __name__ == "__main__":
    server.start_io()
