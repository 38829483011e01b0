"""Inline completion: fast-path checks, cache and type-through, latest-wins jobs per document, budgets, and the
generate → splice → validate → rank pipeline."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types

from dice_copilot.server import backend
from dice_copilot.server.cache import CachedSuggestion, CacheEntry, context_key
from dice_copilot.server.context import infill_window, kernel_in_regions
from dice_copilot.server.jobs import PRIORITY_INFILL, Job, JobCancelled, wait_with_budget
from dice_copilot.server.protocol import ACCEPT_COMMAND, SUGGESTION_READY_NOTIFICATION
from dice_copilot.server.settings import decoding_for

if TYPE_CHECKING:
    from dice_copilot.server.server import DiceCopilotServer

EMPTY = types.InlineCompletionList(items=[])


@dataclass(frozen=True)
class InfillRequest:
    """Everything a job needs, captured when the request arrived."""

    uri: str
    version: int | None
    text: str
    offset: int
    position: types.Position
    path: str | None
    kernel_name: str
    prefix: str
    suffix: str
    reference: object  # context.ReferenceModule | None
    params: str
    key: str


def _retrieve_outcome(task: asyncio.Task) -> None:
    """Mark a job's outcome as seen: a superseded job nobody waits for is expected, not an unhandled error."""
    if not task.cancelled():
        task.exception()


class InfillService:
    def __init__(self, server: "DiceCopilotServer"):
        self.server = server
        self.latest: dict[str, Job] = {}  # uri → its newest infill job
        self.notify_ready: set[str] = set()  # job ids whose requester gave up waiting

    # ---- request ---------------------------------------------------------------------------------------------

    def fast_path(self, params: types.InlineCompletionParams) -> InfillRequest | str:
        """The request context, or the reason to answer empty right away (no awaits here: < 5 ms)."""
        server = self.server
        uri = params.text_document.uri
        document = server.workspace.text_documents.get(uri)
        if document is None:
            return "notInKernel"
        analysis = server.analysis(document)
        if analysis.kind is None:
            return "notInKernel"
        if analysis.too_large:
            return "documentTooLarge"
        automatic = params.context is None or params.context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
        if automatic and not server.settings.autoTrigger:
            return "autoTriggerOff"
        offset = analysis.lines.offset(params.position.line, params.position.character, server.position_encoding)
        kernel = kernel_in_regions(analysis.regions, offset, analysis.kind)
        if kernel is None:
            return "notInKernel"
        if not server.models.ready:
            return "checkpointError" if server.models.state == "error" else "modelLoading"
        if server.generations_running:
            return "generationRunning"
        text = analysis.text
        window = infill_window(text, offset)
        reference = server.reference_for(document.uri, analysis)
        settings = server.settings
        # The settings and the checkpoint id determine the decoding (settings.decoding_for).
        params_key = "|".join(map(str, (
            server.models.loaded.checkpoint_id, settings.maxCandidates, settings.strategy, settings.threshold,
            settings.maxNewTokens, settings.validation, settings.nvcc,
            hash(reference.source) if reference else None, reference.class_name if reference else None)))
        line, character = analysis.lines.position(offset, server.position_encoding)
        return InfillRequest(uri, document.version, text, offset, types.Position(line, character), server.path_of(uri),
                             kernel.kernel_name, window.prefix, window.suffix, reference, params_key,
                             context_key(uri, window.prefix, window.suffix, params_key))

    async def complete(self, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        started = time.perf_counter()
        server = self.server
        request = self.fast_path(params)
        uri = params.text_document.uri
        if isinstance(request, str):
            server.send_status_once(request, uri)
            return EMPTY
        cached = server.cache.get(request.key)
        if cached is not None:
            return self._answer(request, cached.suggestions, cached.reason, started, "cache hit")
        remainders = server.cache.type_through(uri, request.prefix, request.suffix, request.params)
        if remainders:
            return self._answer(request, tuple(remainders), "ok", started, "type-through hit")

        job = self.latest.get(uri)
        if job is None or job.key != request.key or job.cancel_event.is_set():
            if job is not None and job.cancel("superseded"):
                server.log(f"{job.id} superseded by a request at {request.position.line}:{request.position.character}")
                server.send_status("ready", f"{job.id} superseded", reason="superseded", uri=uri, job_id=job.id)
            job = Job("infill", uri, request.key)
            job.task = asyncio.ensure_future(self._run(job, request))
            job.task.add_done_callback(_retrieve_outcome)
            self.latest[uri] = job
            server.jobs[job.id] = job
        automatic = params.context is None or params.context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
        budget_ms = server.settings.autoBudgetMs if automatic else server.settings.invokedBudgetMs
        try:
            finished, entry = await wait_with_budget(job.task, budget_ms / 1000)
        except asyncio.CancelledError:  # $/cancelRequest: stop waiting, let the job finish into the cache
            self.notify_ready.add(job.id)
            server.log(f"request for {job.id} cancelled by the client; the job keeps running")
            raise
        except JobCancelled as cancelled:
            server.send_status("ready", f"{job.id} {cancelled.reason}", reason=cancelled.reason, uri=uri)
            return EMPTY
        if not finished:
            self.notify_ready.add(job.id)
            server.send_status("validating", f"no validated suggestion within {budget_ms} ms; still working, "
                               f"diceCopilot/suggestionReady follows", reason="timeout", uri=uri, job_id=job.id)
            return EMPTY
        return self._answer(request, entry.suggestions, entry.reason, started, "job finished")

    def _answer(self, request: InfillRequest, suggestions: tuple[CachedSuggestion, ...], reason: str,
                started: float, how: str) -> types.InlineCompletionList:
        server = self.server
        latency_ms = (time.perf_counter() - started) * 1000
        server.log(f"inline completion {request.uri}:{request.position.line}: {len(suggestions)} item(s), {how}, "
                   f"{latency_ms:.1f} ms")
        items = []
        for suggestion in suggestions:
            arguments = {"id": suggestion.id, "uri": request.uri, "kernel": request.kernel_name,
                         "verdict": suggestion.verdict}
            items.append(types.InlineCompletionItem(
                insert_text=suggestion.text, range=types.Range(request.position, request.position),
                command=types.Command(title="accepted", command=ACCEPT_COMMAND, arguments=[arguments])))
            server.telemetry_record("shown", id=suggestion.id, uri=request.uri, verdict=suggestion.verdict)
        if items:
            compile_only = all(item.command.arguments[0]["verdict"]["compileOnly"] for item in items)
            message = (f"{len(items)} compile-checked suggestion(s) (no CUDA device: not run)" if compile_only
                       else f"{len(items)} validated suggestion(s)")
            server.send_status("ready", message, reason="noGpu" if compile_only else "ok", uri=request.uri,
                               latency_ms=latency_ms, compile_only=compile_only)
        else:
            server.send_status("ready", f"no suggestion shown: {reason}", reason=reason, uri=request.uri,
                               latency_ms=latency_ms)
        return types.InlineCompletionList(items=items)

    # ---- job -------------------------------------------------------------------------------------------------

    async def _run(self, job: Job, request: InfillRequest) -> CacheEntry:
        server = self.server
        try:
            entry = await self._pipeline(job, request)
            server.cache.put(request.key, entry)
            if job.id in self.notify_ready and self.latest.get(request.uri) is job and not entry.suggestions:
                server.send_status("ready", f"no suggestion: {entry.reason}", reason=entry.reason, uri=request.uri,
                                   job_id=job.id)
            if job.id in self.notify_ready and self.latest.get(request.uri) is job and entry.suggestions:
                document = server.workspace.text_documents.get(request.uri)
                if document is not None and document.version == request.version:
                    server.protocol.notify(SUGGESTION_READY_NOTIFICATION, {
                        "uri": request.uri, "version": request.version, "count": len(entry.suggestions),
                        "position": {"line": request.position.line, "character": request.position.character}})
                    server.log(f"{job.id}: suggestionReady sent ({len(entry.suggestions)} item(s))")
            return entry
        except JobCancelled as cancelled:
            server.log(f"{job.id} stopped: {cancelled.reason}")
            raise
        except Exception as error:  # report, never crash the server
            server.log(f"{job.id} failed: {type(error).__name__}: {error}")
            server.send_status("error", f"infill failed: {error}", reason="internalError", uri=request.uri)
            return CacheEntry(request.uri, request.prefix, request.suffix, request.params, (), "internalError",
                              time.monotonic())
        finally:
            self.notify_ready.discard(job.id)
            server.jobs.pop(job.id, None)
            if self.latest.get(request.uri) is job:
                del self.latest[request.uri]

    async def _pipeline(self, job: Job, request: InfillRequest) -> CacheEntry:
        server = self.server
        reference = request.reference
        loaded = server.models.loaded
        decoding = decoding_for(server.settings, loaded.decoding_defaults)
        prefix, suffix, prompt, answer_tokens = backend.fit_infill_prompt(loaded, reference.source if reference else "",
                                                           request.prefix, request.suffix, decoding.maxNewTokens)
        if prompt is None:
            server.log(f"{job.id}: no room for an answer: the instructions and the reference module plus "
                       f"maxNewTokens={decoding.maxNewTokens} answer tokens exceed the checkpoint's "
                       f"{loaded.engine.config.max_position_embeddings} positions even with the code around the "
                       f"cursor left out; lower diceCopilot.maxNewTokens or use a shorter reference")
            return CacheEntry(request.uri, request.prefix, request.suffix, request.params, (), "promptTooLong",
                              time.monotonic())
        generation = backend.GenerationRequest("infill", prompt, decoding, answer_tokens, prefix=prefix, suffix=suffix)
        job.state = "generating"
        server.log(f"{job.id}: denoising {decoding.maxCandidates} candidate(s) for {request.kernel_name} "
                   f"({loaded.checkpoint})")
        started = time.perf_counter()
        texts = await server.engine_queue.run(
            job, PRIORITY_INFILL, lambda: backend.generate_texts(loaded, generation, job.cancel_event))
        job.check()
        middles: list[str] = []
        for generated in texts:
            middle = backend.infill_middle(prefix, suffix, generated.text)
            if middle and middle.strip() and middle not in middles:
                middles.append(middle)
        server.log(f"{job.id}: {len(texts)} candidate(s) decoded in {time.perf_counter() - started:.2f}s, "
                   f"{len(middles)} distinct splice(s)")
        if not middles:
            return CacheEntry(request.uri, request.prefix, request.suffix, request.params, (), "validationFailed",
                              time.monotonic())
        job.state = "validating"
        server.log(f"{job.id}: validating {len(middles)} candidate(s) together (compile → numerics → timing)")
        candidates = [request.text[:request.offset] + middle + request.text[request.offset:] for middle in middles]
        verdicts = await server.validate_sources(job, candidates, request.path, reference)
        for index, verdict in enumerate(verdicts, 1):
            server.log(f"{job.id}: candidate {index}/{len(middles)}: {verdict.describe()}")
        results = list(zip(middles, verdicts))
        passing = sorted((pair for pair in results if pair[1].passed), key=lambda pair: pair[1].rank_key())
        suggestions = tuple(CachedSuggestion(f"{job.id}-{rank}", middle, verdict.to_wire())
                            for rank, (middle, verdict) in enumerate(passing, 1))
        reason = "ok" if suggestions else backend.failure_reason([verdict for _, verdict in results])
        return CacheEntry(request.uri, request.prefix, request.suffix, request.params, suggestions, reason,
                          time.monotonic())

    def cancel_all(self, reason: str) -> list[str]:
        return [job.id for job in list(self.latest.values()) if job.cancel(reason)]
