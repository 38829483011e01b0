"""The DICE Copilot language server: LSP features wired to the infill, generation and model services."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from dice_copilot.server import backend
from dice_copilot.server.cache import SuggestionCache
from dice_copilot.server.context import (CudaRegion, LineIndex, ReferenceModule, cuda_regions, document_kind,
                                         find_module_classes, find_reference, kernel_in_regions)
from dice_copilot.server.generate import GenerationService
from dice_copilot.server.infill import InfillService
from dice_copilot.server.jobs import EngineQueue, Job, ValidationService
from dice_copilot.server.models import ModelManager
from dice_copilot.server.protocol import (ACCEPT_COMMAND, CANCEL_COMMAND, DID_PARTIALLY_ACCEPT_COMPLETION_NOTIFICATION,
                                          DID_SHOW_COMPLETION_NOTIFICATION, GENERATE_COMMAND, STATUS_COMMAND,
                                          STATUS_NOTIFICATION, VALIDATE_COMMAND, AcceptedSuggestion,
                                          CancelJobArguments, GenerateKernelArguments, ValidateKernelArguments,
                                          lsp_converter)
from dice_copilot.server.settings import SECTION, ServerSettings, decoding_for, merge_settings
from dice_copilot.server.telemetry import TelemetryLog

VERSION = "0.1.0"
MAX_DOCUMENT_CHARS = 2_000_000
REFERENCE_TTL_S = 5.0
# Verdict diagnostic severities: static-check flags are recorded, not rejections.
DIAGNOSTIC_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
                       "flag": types.DiagnosticSeverity.Warning, "note": types.DiagnosticSeverity.Information}  # kernel files are small; beyond this we answer empty instead of scanning


@dataclass
class DocumentAnalysis:
    """Everything derived from one version of a document, computed once (the fast path must not rescan)."""

    version: Any
    text: str
    kind: str | None
    too_large: bool
    lines: LineIndex
    regions: list[CudaRegion]
    reference: ReferenceModule | None = None
    reference_key: tuple | None = None
    reference_time: float = 0.0


class DiceCopilotProtocol(LanguageServerProtocol):
    """pygls's protocol with two answers it would not give: to a request whose params cannot be structured (pygls
    logs it and never answers: a client would wait forever), and Invalid Params to a command sent without an
    argument list."""

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams):
        # pygls calls the handler without arguments when the list is omitted (a TypeError, answered as an internal
        # error); as an empty list, its argument count check answers Invalid Params.
        if params.arguments is None:
            params = attrs.evolve(params, arguments=[])
        return (yield from super().lsp_workspace__execute_command(params))

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if isinstance(data, dict) and "id" in data and "method" in data and "result" not in data:
                message = f"malformed params for {data.get('method')!r}: {error.__cause__ or error}"
                self._send_response(data["id"], error=types.ResponseError(code=JsonRpcInvalidParams.CODE,
                                                                          message=message[:500]))
            raise


class DiceCopilotServer(LanguageServer):
    def __init__(self):
        super().__init__("dice-copilot", VERSION, max_workers=4, protocol_cls=DiceCopilotProtocol,
                         converter_factory=lsp_converter)
        self.settings = ServerSettings()
        self.models = ModelManager(self)
        self.engine_queue = EngineQueue()
        self.validation = ValidationService(self.log)
        self.cache = SuggestionCache()
        self.infill = InfillService(self)
        self.generation = GenerationService(self)
        self.telemetry = TelemetryLog()
        self.jobs: dict[str, Job] = {}
        self.generations_running = 0
        self.verdicts: OrderedDict[tuple[str, str | None], backend.VerdictSummary] = OrderedDict()
        self._analyses: OrderedDict[str, DocumentAnalysis] = OrderedDict()
        self._last_status: tuple | None = None
        self._progress_ids = itertools.count(1)
        self._loop_thread: int | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self.gpu = False

    # ---- plumbing ----------------------------------------------------------------------------------------------

    @property
    def position_encoding(self) -> str:
        encoding = self.workspace.position_encoding
        return str(getattr(encoding, "value", encoding) or "utf-16")

    def _on_loop(self, call, *args) -> None:
        """Run `call` on the event loop thread (engine and loader threads report through here)."""
        if self._event_loop is None or threading.get_ident() == self._loop_thread:
            call(*args)
        else:
            self._event_loop.call_soon_threadsafe(call, *args)

    def report_server_error(self, error: Exception, source) -> None:
        """Malformed messages are logged, not shown as error pop-ups (an editor plugin bug must not nag the user)."""
        self.log(f"ignored a message the server could not handle: {type(error).__name__}: {error}")

    def log(self, message: str) -> None:
        """A pipeline stage, to window/logMessage."""
        self._on_loop(self.window_log_message, types.LogMessageParams(type=types.MessageType.Log, message=message))

    def show_message(self, message: str, warning: bool = False) -> None:
        self.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Warning if warning else types.MessageType.Info, message=message))

    def send_status(self, state: str, message: str, reason: str | None = None, uri: str | None = None,
                    job_id: str | None = None, latency_ms: float | None = None, compile_only: bool | None = None) -> None:
        payload = {"state": state, "message": message, "gpu": self.gpu,
                   "compileOnly": (not self.gpu) if compile_only is None else compile_only,
                   "untrained": self.models.untrained}
        for key, value in (("reason", reason), ("uri", uri), ("jobId", job_id), ("lastLatencyMs", latency_ms)):
            if value is not None:
                payload[key] = round(value, 1) if key == "lastLatencyMs" else value
        self._last_status = (state, reason, uri)
        self.protocol.notify(STATUS_NOTIFICATION, payload)

    def send_status_once(self, reason: str, uri: str) -> None:
        """Status for a fast-path empty answer, sent only when the reason changed (every keystroke asks)."""
        if self._last_status == ("ready", reason, uri):
            return
        messages = {
            "notInKernel": "no suggestion: the cursor is not inside a __global__/__device__ function body",
            "modelLoading": "no suggestion: the checkpoint is still loading",
            "checkpointError": f"no suggestion: {self.models.error}",
            "autoTriggerOff": "no suggestion: automatic suggestions are off (diceCopilot.autoTrigger)",
            "generationRunning": "no suggestion: a kernel generation is using the GPU",
            "documentTooLarge": f"no suggestion: the document is over {MAX_DOCUMENT_CHARS:,} characters",
        }
        self.send_status("ready", messages.get(reason, reason), reason=reason, uri=uri)

    async def begin_progress(self, title: str, message: str, cancellable: bool, job: Job | None = None):
        """Server-initiated $/progress when the client supports it; returns the token or None."""
        window = self.client_capabilities.window
        if not (window and window.work_done_progress):
            return None
        token = f"dice-copilot-{uuid.uuid4().hex[:8]}-{next(self._progress_ids)}"
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), timeout=5)
        except Exception as error:  # a client that refuses progress still gets the work done
            self.log(f"progress not created: {error}")
            return None
        future = self.work_done_progress.tokens.get(token)
        if job is not None and future is not None:
            future.add_done_callback(lambda done: job.cancel("cancelled") if done.cancelled() else None)
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message,
                                                                         cancellable=cancellable))
        return token

    def report_progress(self, token, message: str) -> None:
        self.log(message)
        if token is not None:
            self.work_done_progress.report(token, types.WorkDoneProgressReport(message=message))

    def end_progress(self, token, message: str) -> None:
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            self.work_done_progress.tokens.pop(token, None)

    def telemetry_record(self, event: str, **fields) -> None:
        problem = self.telemetry.record(event, **fields)
        if problem:
            self.log(problem)

    # ---- documents -----------------------------------------------------------------------------------------------

    @staticmethod
    def path_of(uri: str) -> str | None:
        try:
            return to_fs_path(uri) if uri.startswith("file:") else None
        except Exception:
            return None

    def document_text(self, uri: str) -> str | None:
        """The editor's text of a document, else the file on disk."""
        document = self.workspace.text_documents.get(uri)
        if document is not None:
            return document.source
        path = self.path_of(uri)
        if path is None:
            return None
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def analysis_of_text(self, uri: str, text: str, version: Any = None, language_id: str | None = None):
        kind = document_kind(uri, language_id)
        too_large = len(text) > MAX_DOCUMENT_CHARS
        regions = cuda_regions(text, kind) if kind and not too_large else []
        return DocumentAnalysis(version, text, kind, too_large, LineIndex(text) if not too_large else LineIndex(""),
                                regions)

    def analysis(self, document) -> DocumentAnalysis:
        cached = self._analyses.get(document.uri)
        if cached is not None and cached.version == document.version and cached.version is not None:
            self._analyses.move_to_end(document.uri)
            return cached
        analysis = self.analysis_of_text(document.uri, document.source, document.version, document.language_id)
        self._analyses[document.uri] = analysis
        while len(self._analyses) > 32:
            self._analyses.popitem(last=False)
        return analysis

    def reference_for(self, uri: str, analysis: DocumentAnalysis) -> ReferenceModule | None:
        """The reference module of a document; sibling files are re-read at most every few seconds, not on every
        keystroke."""
        now = time.monotonic()
        key = (self.settings.referenceModule,)
        if analysis.reference_key == key and now - analysis.reference_time < REFERENCE_TTL_S:
            return analysis.reference
        analysis.reference = find_reference(self.path_of(uri), analysis.text, analysis.kind or "",
                                            self.settings.referenceModule)
        analysis.reference_key, analysis.reference_time = key, now
        return analysis.reference

    # ---- validation ----------------------------------------------------------------------------------------------

    async def validate_source(self, job: Job, source: str, path: str | None,
                              reference: ReferenceModule | None) -> backend.VerdictSummary:
        """Validate a candidate in the worker process; worker failures become a failed verdict."""
        return (await self.validate_sources(job, [source], path, reference))[0]

    async def validate_sources(self, job: Job, sources: list[str], path: str | None,
                               reference: ReferenceModule | None) -> list[backend.VerdictSummary]:
        """Validate versions of one file together (parallel compiles); worker failures become failed verdicts."""
        request = backend.validation_request(sources, path, reference.source if reference else None,
                                             reference.path if reference else None,
                                             reference.class_name if reference else "Model", self.settings)
        try:
            verdicts = [backend.VerdictSummary.from_json(v) for v in await self.validation.validate(job, request)]
        except RuntimeError as error:
            return [backend.VerdictSummary.worker_failure(f"the validator failed: {error}")] * len(sources)
        for verdict in verdicts:
            if verdict.compile_only and self.gpu:
                self.log(f"{job.id}: verdict is compile-only although a GPU is present: {verdict.failure or ''}")
        return verdicts

    def remember_verdict(self, uri: str, kernel: str | None, verdict: backend.VerdictSummary) -> None:
        """Last verdict per kernel for hovers (None: the whole file), bounded."""
        self.verdicts[(uri, kernel)] = verdict
        self.verdicts.move_to_end((uri, kernel))
        while len(self.verdicts) > 512:
            self.verdicts.popitem(last=False)

    def publish_verdict_diagnostics(self, uri: str, text: str, verdict: backend.VerdictSummary) -> None:
        """Compiler errors of the verdict at their lines of this document (lines are 1-based in the verdict)."""
        lines = LineIndex(text)
        name = Path(self.path_of(uri) or uri).name
        diagnostics = []
        for item in verdict.diagnostics:
            file = item.get("file")
            if file and Path(str(file)).name not in (name, "", "<candidate>", "candidate"):
                continue
            line = max(int(item.get("line") or 1) - 1, 0)
            column = max(int(item.get("column") or 1) - 1, 0)
            line = min(line, max(len(lines.starts) - 1, 0))
            start = lines.position(lines.offset(line, 0) + column)
            end = lines.position(lines.line_end(line))
            kind = str(item.get("severity", "error")).lower()
            message = str(item.get("message", ""))
            diagnostics.append(types.Diagnostic(
                range=types.Range(types.Position(*start), types.Position(*end)), message=message,
                severity=DIAGNOSTIC_SEVERITY.get(kind, types.DiagnosticSeverity.Error),
                source="dice-copilot (static check)" if message.startswith("[") else "dice-copilot (compiler)"))
        if not verdict.passed and not diagnostics and verdict.failure:
            diagnostics.append(types.Diagnostic(range=types.Range(types.Position(0, 0), types.Position(0, 0)),
                                                message=verdict.failure, severity=types.DiagnosticSeverity.Error,
                                                source="dice-copilot"))
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    # ---- edits -------------------------------------------------------------------------------------------------

    async def create_file(self, target: Path, text: str) -> bool:
        """A NEW file with `text`: through workspace/applyEdit (undoable in the editor) when the client can create
        files, else written directly with exclusive creation. Never overwrites."""
        uri = target.as_uri()
        workspace_edit = self.client_capabilities.workspace.workspace_edit if self.client_capabilities.workspace else None
        can_create = bool(workspace_edit and workspace_edit.document_changes and workspace_edit.resource_operations
                          and types.ResourceOperationKind.Create in workspace_edit.resource_operations)
        if can_create and self.client_capabilities.workspace.apply_edit:
            edit = types.WorkspaceEdit(document_changes=[
                types.CreateFile(uri=uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)),
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None),
                    edits=[types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(0, 0)),
                                          new_text=text)])])
            result = await self.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
                edit=edit, label="DICE Copilot: generated kernel"))
            self.log(f"applyEdit {target.name}: applied={result.applied} {result.failure_reason or ''}")
            return bool(result.applied)
        try:
            with target.open("x", encoding="utf-8") as stream:
                stream.write(text)
        except OSError as error:
            self.log(f"could not create {target}: {error}")
            return False
        self.log(f"wrote {target} (the client cannot create files through applyEdit)")
        return True

    async def show_document(self, uri: str) -> None:
        window = self.client_capabilities.window
        if window and window.show_document and window.show_document.support:
            await self.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))

    # ---- settings ----------------------------------------------------------------------------------------------

    def apply_settings(self, update: Any, source: str) -> None:
        before = self.settings
        merged, errors = merge_settings(before, update)
        for error in errors:
            self.show_message(f"DICE Copilot setting ignored ({source}): {error}", warning=True)
        self.settings = merged
        self.telemetry.configure(merged.telemetry.enabled, merged.telemetry.path)
        if merged != before:
            self.log(f"settings updated from {source}")
        if self.models.loads or self.models.state in ("loading", "error"):
            if (merged.checkpoint, merged.device) != (before.checkpoint, before.device):
                self.models.request(merged.checkpoint, merged.device, "setting changed")

    async def pull_settings(self) -> None:
        workspace = self.client_capabilities.workspace
        if not (workspace and workspace.configuration):
            return
        try:
            result = await asyncio.wait_for(self.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section=SECTION)])), timeout=3)
        except Exception as error:
            self.log(f"workspace/configuration failed: {error}")
            return
        if result and isinstance(result[0], dict):
            self.apply_settings(result[0], "workspace/configuration")

    async def startup(self) -> None:
        self._loop_thread = threading.get_ident()
        self._event_loop = asyncio.get_running_loop()
        self.gpu = await asyncio.get_running_loop().run_in_executor(None, backend.cuda_available)
        await self.pull_settings()
        self.models.request(self.settings.checkpoint, self.settings.device, "startup")
        try:
            await self.validation.start()
        except Exception as error:
            self.log(f"validation worker not started: {error}")

    def shutdown_services(self) -> None:
        for job in list(self.jobs.values()):
            job.cancel("shutdown")
        self.validation.shutdown()
        self.engine_queue.shutdown()
        self.models.shutdown()

    def status_snapshot(self) -> dict:
        loaded = self.models.loaded
        state = {"starting": "starting", "loading": "loadingModel", "ready": "ready", "error": "error"}[self.models.state]
        if self.generations_running:
            state = "generating"
        return {"state": state, "message": self.models.error or f"{len(self.jobs)} job(s) running",
                "gpu": self.gpu, "compileOnly": not self.gpu, "untrained": self.models.untrained,
                "checkpoint": loaded.checkpoint if loaded else self.settings.checkpoint,
                "checkpointId": loaded.checkpoint_id if loaded else None,
                "device": loaded.device if loaded else self.settings.device, "loads": self.models.loads,
                # What decoding uses with the checkpoint serving now, each value with its source; null until one is.
                "decoding": decoding_for(self.settings, loaded.decoding_defaults).to_wire() if loaded else None,
                "validationWorkerPid": self.validation.pid, "validationWorkerKills": self.validation.kills,
                "cacheEntries": len(self.cache),
                "jobs": [{"jobId": job.id, "kind": job.kind, "uri": job.uri, "state": job.state}
                         for job in self.jobs.values()]}


server = DiceCopilotServer()


# ---- lifecycle and settings -----------------------------------------------------------------------------------------


@server.feature(types.INITIALIZE)
def on_initialize(ls: DiceCopilotServer, params: types.InitializeParams) -> None:
    options = params.initialization_options
    if isinstance(options, dict) and isinstance(options.get("settings"), dict):
        ls.apply_settings(options["settings"], "initializationOptions")


@server.feature(types.INITIALIZED)
def on_initialized(ls: DiceCopilotServer, params: types.InitializedParams) -> None:
    asyncio.ensure_future(ls.startup())


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: DiceCopilotServer, params: Any) -> None:
    ls.shutdown_services()


@server.feature(types.EXIT)
def on_exit(ls: DiceCopilotServer, params: Any) -> None:
    """End the process now: pygls would first wait for its stdin reader thread, which blocks until the client closes
    the pipe. Exit code 0 after `shutdown`, 1 without (LSP)."""
    ls.shutdown_services()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ls.protocol._shutdown else 1)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_configuration(ls: DiceCopilotServer, params: types.DidChangeConfigurationParams) -> None:
    if isinstance(params.settings, dict) and params.settings:
        ls.apply_settings(params.settings, "didChangeConfiguration")
    await ls.pull_settings()


# ---- documents ------------------------------------------------------------------------------------------------------


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: DiceCopilotServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    job = ls.infill.latest.get(uri)
    if job is not None:
        job.cancel("superseded")
    ls._analyses.pop(uri, None)


# ---- inline completion ----------------------------------------------------------------------------------------------


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(ls: DiceCopilotServer, params: types.InlineCompletionParams):
    return await ls.infill.complete(params)


@server.command(ACCEPT_COMMAND)
def did_accept(ls: DiceCopilotServer, accepted: AcceptedSuggestion) -> None:
    verdict = accepted.verdict
    summary = backend.VerdictSummary(verdict.passed, verdict.stage, verdict.compileOnly, verdict.failure,
                                     verdict.failureCode, verdict.speedup, verdict.maxAbsError, (), verdict.notRun)
    ls.log(f"suggestion {accepted.id} accepted ({summary.to_wire()})")
    ls.telemetry_record("accepted", id=accepted.id, uri=accepted.uri, verdict=summary.to_wire())
    if accepted.uri is not None and accepted.kernel is not None:
        ls.remember_verdict(accepted.uri, accepted.kernel, summary)


@server.feature(DID_SHOW_COMPLETION_NOTIFICATION)
def did_show(ls: DiceCopilotServer, params: Any) -> None:
    ls.telemetry_record("didShow", id=getattr(params, "id", None))


@server.feature(DID_PARTIALLY_ACCEPT_COMPLETION_NOTIFICATION)
def did_partially_accept(ls: DiceCopilotServer, params: Any) -> None:
    ls.telemetry_record("partiallyAccepted", id=getattr(params, "id", None),
                        acceptedLength=getattr(params, "acceptedLength", None))


# ---- kernel generation, validation, jobs ----------------------------------------------------------------------------


def _python_analysis(ls: DiceCopilotServer, uri: str):
    """(document, analysis) of an open Python document that is small enough to analyse, else (document, None)."""
    document = ls.workspace.text_documents.get(uri)
    if document is None or document_kind(document.uri, document.language_id) != "python":
        return document, None
    analysis = ls.analysis(document)
    return document, None if analysis.too_large else analysis


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]))
def code_actions(ls: DiceCopilotServer, params: types.CodeActionParams):
    document, analysis = _python_analysis(ls, params.text_document.uri)
    if analysis is None:
        return None
    encoding = ls.position_encoding
    start = analysis.lines.offset(params.range.start.line, params.range.start.character, encoding)
    end = analysis.lines.offset(params.range.end.line, params.range.end.character, encoding)
    actions = []
    for module in find_module_classes(analysis.text):
        if module.start <= end and start <= module.end:
            actions.append(types.CodeAction(
                title=f"Generate CUDA kernel for {module.name}", kind=types.CodeActionKind.RefactorRewrite,
                command=types.Command(title=f"Generate CUDA kernel for {module.name}", command=GENERATE_COMMAND,
                                      arguments=[{"uri": document.uri, "className": module.name}])))
    return actions or None


@server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
def code_lenses(ls: DiceCopilotServer, params: types.CodeLensParams):
    document, analysis = _python_analysis(ls, params.text_document.uri)
    if analysis is None:
        return None
    lenses = []
    for module in find_module_classes(analysis.text):
        line, character = analysis.lines.position(module.start, ls.position_encoding)
        lenses.append(types.CodeLens(
            range=types.Range(types.Position(line, character), types.Position(line, character)),
            command=types.Command(title="⚡ Generate CUDA kernel", command=GENERATE_COMMAND,
                                  arguments=[{"uri": document.uri, "className": module.name}])))
    return lenses


@server.command(GENERATE_COMMAND)
async def generate_kernel(ls: DiceCopilotServer, target: GenerateKernelArguments):
    return await ls.generation.generate_kernel(target)


@server.command(VALIDATE_COMMAND)
async def validate_kernel(ls: DiceCopilotServer, target: ValidateKernelArguments):
    return await ls.generation.validate_kernel(target)


@server.command(CANCEL_COMMAND)
def cancel_job(ls: DiceCopilotServer, spec: CancelJobArguments):
    cancelled = [job.id for job in list(ls.jobs.values())
                 if (spec.jobId is None or job.id == spec.jobId) and job.cancel("cancelled")]
    ls.log(f"cancelJob: {cancelled or 'nothing to cancel'}")
    return {"cancelled": cancelled}


@server.command(STATUS_COMMAND)
def show_status(ls: DiceCopilotServer, *_ignored: Any):
    """Takes no argument or `{}` (clients send either); any argument is ignored."""
    return ls.status_snapshot()


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: DiceCopilotServer, params: types.HoverParams):
    document = ls.workspace.text_documents.get(params.text_document.uri)
    if document is None:
        return None
    analysis = ls.analysis(document)
    if analysis.kind is None or analysis.too_large:
        return None
    offset = analysis.lines.offset(params.position.line, params.position.character, ls.position_encoding)
    kernel = kernel_in_regions(analysis.regions, offset, analysis.kind, include_signature=True)
    if kernel is None:
        return None
    verdict = ls.verdicts.get((document.uri, kernel.kernel_name)) or ls.verdicts.get((document.uri, None))
    if verdict is None:
        text = f"**{kernel.kernel_name}**: not validated yet (run *DICE Copilot: validate kernel*)"
    else:
        text = f"**{kernel.kernel_name}** — last verdict: {verdict.describe()}"
        if verdict.stage:
            text += f"  \nstage reached: `{verdict.stage}`"
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))
