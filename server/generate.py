"""Whole-kernel generation for an `nn.Module` (code action / lens → `diceCopilot.generateKernel`) and validation of
the user's own kernels (`diceCopilot.validateKernel`, diagnostics, hover verdicts)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pygls.exceptions import JsonRpcInvalidParams

from dice_copilot.server import backend
from dice_copilot.validator.verdict import Stage
from dice_copilot.server.context import (ModuleClass, ReferenceModule, defines_get_inputs, find_module_classes,
                                         kernel_names, new_kernel_path)
from dice_copilot.server.jobs import PRIORITY_KERNEL, Job, JobCancelled
from dice_copilot.server.protocol import (GENERATION_UPDATE_NOTIFICATION, GenerateKernelArguments,
                                          ValidateKernelArguments)
from dice_copilot.server.settings import decoding_for

if TYPE_CHECKING:
    from dice_copilot.server.server import DiceCopilotServer


def prompt_code_for(source: str, class_name: str) -> str:
    """The reference as the DICE prompt expects it: the target class named `Model` (the model was trained on that
    name), unless the file already uses `Model` for something else."""
    if class_name == "Model" or re.search(r"\bModel\b", source):
        return source
    return re.sub(rf"\b{re.escape(class_name)}\b", "Model", source)


class GenerationService:
    def __init__(self, server: "DiceCopilotServer"):
        self.server = server

    # ---- generateKernel --------------------------------------------------------------------------------------

    def _pick_class(self, text: str, target: GenerateKernelArguments) -> ModuleClass:
        classes = find_module_classes(text)
        if not classes:
            raise JsonRpcInvalidParams(f"no `class X(nn.Module)` found in {target.uri}: kernel generation needs a "
                                       f"PyTorch module to implement")
        if target.className:
            for module in classes:
                if module.name == target.className:
                    return module
            raise JsonRpcInvalidParams(f"class {target.className!r} is not an nn.Module in {target.uri} (found: "
                                       f"{', '.join(module.name for module in classes)})")
        position = target.position
        if position is not None:
            analysis = self.server.analysis_of_text(target.uri, text)
            offset = analysis.lines.offset(position.line, position.character, self.server.position_encoding)
            for module in classes:
                if module.start <= offset <= module.end:
                    return module
        return classes[0]

    async def generate_kernel(self, target: GenerateKernelArguments) -> dict:
        server = self.server
        uri = target.uri
        text = server.document_text(uri)
        if text is None:
            raise JsonRpcInvalidParams(f"{uri} is neither open in the editor nor a readable file")
        module = self._pick_class(text, target)
        path = server.path_of(uri)
        file_name = Path(path).name if path else uri
        if not defines_get_inputs(text):
            raise JsonRpcInvalidParams(
                f"cannot determine the inputs of {module.name}.forward: define a module-level `get_inputs()` in "
                f"{file_name} returning a list of example inputs (e.g. `return [torch.randn(64, 128)]`), and "
                f"`get_init_inputs()` returning {module.name}'s constructor arguments if it takes any")
        if path is None:
            raise JsonRpcInvalidParams(f"{uri} is not a file on disk; save it first so that the generated kernel can "
                                       f"be written next to it")
        if not server.models.ready:
            raise JsonRpcInvalidParams(f"the model is not ready yet ({server.models.error or 'still loading'}); "
                                       f"try again when diceCopilot/status says ready")
        job = Job("kernel", uri)
        server.jobs[job.id] = job
        server.generations_running += 1
        for cancelled in server.infill.cancel_all("generationRunning"):
            server.log(f"{cancelled} pre-empted by kernel generation {job.id}")
        progress = await server.begin_progress(f"Generating CUDA kernel for {module.name}", "tracing reference",
                                               cancellable=True, job=job)
        server.send_status("generating", f"generating a CUDA kernel for {module.name}", job_id=job.id, uri=uri)
        try:
            result = await self._generate(job, progress, text, path, module)
        except JobCancelled as cancelled:
            result = {"jobId": job.id, "status": "cancelled", "message": f"generation {cancelled.reason}",
                      "candidates": []}
        finally:
            server.generations_running -= 1
            server.jobs.pop(job.id, None)
        server.end_progress(progress, result["message"])
        reasons = {"ok": "ok", "noValidCandidate": "validationFailed", "cancelled": "cancelled", "error": "internalError"}
        server.send_status("ready", result["message"], job_id=job.id, uri=uri, reason=reasons[result["status"]])
        return result

    async def _generate(self, job: Job, progress, text: str, path: str, module: ModuleClass) -> dict:
        server = self.server
        loaded = server.models.loaded
        decoding = decoding_for(server.settings, loaded.decoding_defaults)
        reference = ReferenceModule(text, path, module.name)
        request = backend.GenerationRequest(
            "kernel", backend.build_kernel_prompt(prompt_code_for(text, module.name)), decoding,
            decoding.kernelMaxNewTokens, pytorch_code=text)
        loop = asyncio.get_running_loop()

        def on_block(index: int) -> None:
            loop.call_soon_threadsafe(server.report_progress, progress, f"denoising block {index + 1}")

        server.report_progress(progress, f"denoising {decoding.maxCandidates} candidate(s)")
        server.log(f"{job.id}: generating {decoding.maxCandidates} candidate(s) for {module.name} "
                   f"({loaded.checkpoint})")
        started = time.perf_counter()
        texts = await server.engine_queue.run(
            job, PRIORITY_KERNEL, lambda: backend.generate_texts(loaded, request, job.cancel_event, on_block))
        job.check()
        server.log(f"{job.id}: decoded {len(texts)} candidate(s) in {time.perf_counter() - started:.1f}s")
        total = len(texts)
        modules: list[tuple[int, str]] = []
        summaries: list[dict] = []
        for index, generated in enumerate(texts, 1):
            code = backend.generated_module(generated.text)
            if code is None or "ModelNew" not in code:
                failure = "the answer has no code block with a ModelNew class"
                self._update(job, index, total, "failed", None, failure)
                summaries.append({"index": index, "passed": False, "stage": None, "failure": failure,
                                  "speedup": None, "maxAbsError": None})
                continue
            self._update(job, index, total, "generated", None, None)
            modules.append((index, code))
        target = new_kernel_path(Path(path))
        best: tuple[str, backend.VerdictSummary] | None = None
        unchecked: backend.VerdictSummary | None = None  # one that this machine could not check
        for position, (index, code) in enumerate(modules, 1):
            count = f"{position}/{len(modules)}"
            server.report_progress(progress, f"compiling {count}")
            verdict = await server.validate_source(job, code, str(target), reference)
            if verdict.correct:
                error = "n/a" if verdict.max_abs_error is None else f"{verdict.max_abs_error:.1e}"
                server.report_progress(progress, f"checking numerics {count} (max err {error})")
            if verdict.correct and verdict.stage == Stage.TIMED and verdict.speedup is not None:
                server.report_progress(progress, f"timing {count} ({verdict.speedup:.2f}× vs torch)")
            server.log(f"{job.id}: candidate {index}/{total}: {verdict.describe()}")
            self._update(job, index, total, "passed" if verdict.passed else "failed", verdict, verdict.failure)
            summaries.append({"index": index, **_wire_summary(verdict)})
            unchecked = unchecked or (verdict if verdict.not_checked else None)
            if verdict.passed and (best is None or verdict.rank_key() < best[1].rank_key()):
                best = (code, verdict)
        summaries.sort(key=lambda summary: summary["index"])
        if best is None and unchecked is not None:
            return {"jobId": job.id, "status": "noValidCandidate", "candidates": summaries,
                    "message": f"the candidates for {module.name} could not be checked on this machine: "
                               f"{unchecked.failure}"}
        if best is None:
            return {"jobId": job.id, "status": "noValidCandidate", "candidates": summaries,
                    "message": f"none of {total} candidate(s) for {module.name} passed validation"}
        code, verdict = best
        job.check()
        target = new_kernel_path(Path(path))  # again: a file may have appeared while we validated
        written = await server.create_file(target, self._file_text(code, Path(path).name, module.name, verdict))
        if not written:
            return {"jobId": job.id, "status": "error", "candidates": summaries,
                    "message": f"the editor refused to create {target}"}
        server.remember_verdict(target.as_uri(), None, verdict)
        await server.show_document(target.as_uri())
        return {"jobId": job.id, "status": "ok", "candidates": summaries,
                "message": f"wrote {target.name}: {verdict.describe()}",
                "best": {"uri": target.as_uri(), "speedup": verdict.speedup, "maxAbsError": verdict.max_abs_error,
                         "compileOnly": verdict.compile_only}}

    @staticmethod
    def _file_text(code: str, source_name: str, class_name: str, verdict: backend.VerdictSummary) -> str:
        header = f"# Generated by DICE Copilot from {source_name} ({class_name}). Verdict: {verdict.describe()}\n"
        return header + code.rstrip("\n") + "\n"

    def _update(self, job: Job, index: int, total: int, status: str, verdict: backend.VerdictSummary | None,
                failure: str | None) -> None:
        payload = {"jobId": job.id, "candidate": index, "total": total, "status": status, "failure": failure}
        if verdict is not None:
            payload.update(stage=verdict.stage, speedup=verdict.speedup, maxAbsError=verdict.max_abs_error,
                           compileOnly=verdict.compile_only)
        self.server.protocol.notify(GENERATION_UPDATE_NOTIFICATION, payload)

    # ---- validateKernel --------------------------------------------------------------------------------------

    async def validate_kernel(self, target: ValidateKernelArguments) -> dict:
        """Validate the document as it is in the editor and publish compiler errors as diagnostics."""
        server = self.server
        uri = target.uri
        text = server.document_text(uri)
        if text is None:
            raise JsonRpcInvalidParams(f"{uri} is neither open in the editor nor a readable file")
        analysis = server.analysis_of_text(uri, text)
        if analysis.kind is None or not analysis.regions:
            raise JsonRpcInvalidParams(f"{uri} has no CUDA source to validate (a .cu/.cuh file, or a Python file "
                                       f"with CUDA source strings for load_inline)")
        job = Job("validate", uri)
        server.jobs[job.id] = job
        server.send_status("validating", f"validating {Path(server.path_of(uri) or uri).name}", job_id=job.id,
                           uri=uri)
        try:
            verdict = await server.validate_source(job, text, server.path_of(uri), server.reference_for(uri, analysis))
        except JobCancelled as cancelled:
            return {"uri": uri, "jobId": job.id, "cancelled": cancelled.reason}
        finally:
            server.jobs.pop(job.id, None)
        server.publish_verdict_diagnostics(uri, text, verdict)
        for name in kernel_names(analysis.regions):
            server.remember_verdict(uri, name, verdict)
        server.send_status("ready", f"validation: {verdict.describe()}", uri=uri,
                           reason="ok" if verdict.passed else backend.failure_reason([verdict]),
                           compile_only=verdict.compile_only)
        return {"uri": uri, "jobId": job.id, "verdict": verdict.to_wire(),
                "diagnostics": len(verdict.diagnostics)}


def _wire_summary(verdict: backend.VerdictSummary) -> dict:
    wire = verdict.to_wire()
    return {key: wire[key] for key in ("passed", "stage", "failure", "speedup", "maxAbsError", "compileOnly")}
