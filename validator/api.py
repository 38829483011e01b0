"""The validator's public entry points: `validate`, `Budget` and `ValidatorPool` (static checks -> compile on all CPU
cores -> correctness and timing in one worker process per GPU)."""

from __future__ import annotations

import atexit
import queue
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .compile import CompileConfig, ExtensionBuilder, usable_cpus
from .environment import diagnose_build
from .kernel_split import GLOBAL_KERNEL
from .problem import Candidate, InputError, Problem
from .verdict import Diagnostic, FailureCode, Stage, TimingStats, Verdict
from .worker import FRESH_WORKER_FAILURES, STARTUP_PHASE, WorkerError, WorkerProcess

NO_DEVICE = "not run: no CUDA device"
NOT_CHECKED_HERE = "this machine cannot check the kernel (not its fault)"
# A job that waited this long for its worker to come up paid for a process start (an idle worker answers in us).
FRESH_WORKER_WAIT_S = 0.2


@dataclass
class Budget:
    """Time limits and rigour of one verdict. The one definition of every default: the worker's harness rebuilds this
    dataclass from the job it receives."""

    compile_timeout_s: float = 180.0  # per extension build; the compiler process group is killed after it
    call_timeout_s: float = 20.0  # per phase of the GPU checks (3x for trials that run both models)
    total_timeout_s: float = 600.0  # whole GPU stage of one verdict
    timing: bool = True  # measure speed after correctness (off for binary RL rewards)
    n_correct_trials: int = 5  # at least 5 (varied input distributions)
    timing_trials: int = 100  # timed calls per model (fewer when the median is stable)
    min_timing_trials: int = 20
    timing_budget_s: float = 10.0  # wall-clock cap for the timed loop
    timing_input_sets: int = 8
    atol: float | None = None  # None: 1e-4 for fp32, 1e-2 for fp16/bf16 (KernelBench)
    rtol: float | None = None
    rel_l2_tol: float | None = None  # ||out-ref|| / ||ref|| bound, same defaults
    attribution: bool = False  # profile kernel attribution in ide policy too (always on in strict)
    attribution_threshold: float = 0.5  # strict: share of GPU time in the candidate's own kernels
    dtype: str | None = None  # run both models in this dtype ("float16", "bfloat16"); None = as defined
    seed: int | None = None  # None: a fresh secret seed per verdict

    def tolerances(self, half: bool) -> tuple[float, float, float]:
        """(atol, rtol, rel_l2_tol) for outputs of a half-precision (float16/bfloat16) or a wider dtype: the set
        values, else KernelBench's (1e-2 for half precision, 1e-4 otherwise)."""
        default = 1e-2 if half else 1e-4
        return tuple(default if value is None else value for value in (self.atol, self.rtol, self.rel_l2_tol))


def _as_problem(problem) -> Problem:
    if isinstance(problem, Problem):
        return problem
    if isinstance(problem, Path):
        return Problem.from_file(problem)
    if isinstance(problem, str):
        return Problem.from_source(problem)
    raise InputError(f"a problem must be a Problem, a source string or a pathlib.Path, not {type(problem).__name__}")


def _as_candidate(candidate) -> Candidate:
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, Path):
        return Candidate.from_file(candidate)
    if isinstance(candidate, str):
        return Candidate.from_source(candidate)
    raise InputError(f"a candidate must be a Candidate, a source string or a pathlib.Path, not "
                     f"{type(candidate).__name__}")


def cuda_device_count() -> int:
    """Visible CUDA devices, without creating a CUDA context in this process."""
    try:
        import torch
        return torch.cuda.device_count() if torch.version.cuda or torch.cuda.is_available() else 0
    except Exception:
        return 0


@dataclass
class _Work:
    """A verdict in progress."""

    problem: Problem
    candidate: Candidate
    policy: str
    budget: Budget
    verdict: Verdict = field(default_factory=Verdict)
    prebuilt: dict = field(default_factory=dict)
    kernel_names: list[str] = field(default_factory=list)
    needs_gpu: bool = False


class ValidatorPool:
    """Worker processes (one per visible GPU) plus a compile thread pool; safe to use from several threads."""

    # A worker is replaced after this many verdicts (loaded extensions and allocator state pile up).
    MAX_JOBS_PER_WORKER = 256

    def __init__(self, gpus: list[int] | None = None, compile_config: CompileConfig | None = None,
                 compile_workers: int | None = None, warm: bool = True, run_on_cpu: bool = False,
                 workers_per_gpu: int = 1):
        """gpus: device indices to use (default: all visible). run_on_cpu: run the correctness/timing stage on the
        CPU in one worker (for pure-PyTorch candidates and tests on machines without a GPU). workers_per_gpu > 1
        overlaps correctness checks of a batch (keep 1 when timing: timed runs need the GPU to themselves)."""
        self.compile_config = compile_config or CompileConfig()
        self.builder = ExtensionBuilder(self.compile_config)
        self.device = "cpu" if run_on_cpu else "cuda"
        self.gpus = [None] if run_on_cpu else list(range(cuda_device_count())) if gpus is None else list(gpus)
        self._compile_workers = compile_workers or usable_cpus()
        self._compile_pool = ThreadPoolExecutor(self._compile_workers,
                                                thread_name_prefix="dice-compile")
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._workers = [WorkerProcess(gpu_index=g) for g in self.gpus for _ in range(max(1, workers_per_gpu))]
        for worker in self._workers:
            self._idle.put(worker)
            if warm:
                threading.Thread(target=self._start_quietly, args=(worker,), daemon=True).start()
        if warm and self.gpus and not run_on_cpu and self.compile_config.use_pch:
            threading.Thread(target=self.builder.prepare_common_headers, daemon=True).start()
        self._closed = False
        # Telemetry: workers killed and restarted for a module-name clash (should stay 0: every fast-mode build has
        # a module name of its own) and workers replaced after a crash, hang, sticky error or their job quota.
        self.worker_swaps = 0
        self.worker_replacements = 0

    @staticmethod
    def _start_quietly(worker: WorkerProcess) -> None:
        try:
            if not worker.alive:
                worker.start()
        except WorkerError:
            worker.kill()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    # ------------------------------------------------------------ public API

    def validate(self, problem, candidate, policy: str = "ide", budget: Budget | None = None) -> Verdict:
        return self.validate_many([(problem, candidate)], policy, budget)[0]

    def validate_many(self, items, policy: str = "ide", budget: Budget | None = None) -> list[Verdict]:
        """Verdicts for (problem, candidate) pairs, in order, all of them in flight at once."""
        items = list(items)
        verdicts: list[Verdict | None] = [None] * len(items)
        for index, verdict in self.validate_iter(items, policy, budget, max_in_flight=max(1, len(items))):
            verdicts[index] = verdict
        return verdicts

    def validate_iter(self, items, policy: str = "ide", budget: Budget | None = None,
                      max_in_flight: int | None = None, give_up_at: float | None = None):
        """(index, verdict) for each (problem, candidate) of `items`, as each verdict is ready: compiles run on all
        CPU cores while the GPUs check whichever candidates finished compiling first, with no barrier between
        candidates. `items` is read lazily, at most `max_in_flight` (default: twice the compile threads) at a time,
        so a long stream holds little memory and stops being read when the caller stops iterating (what is in
        flight then finishes in the background, unreported). give_up_at (a time.perf_counter() value): past it,
        the stream ends without waiting for the verdicts still in flight (a run that must end by a deadline)."""
        if policy not in ("ide", "strict"):
            raise InputError(f"policy must be 'ide' or 'strict', not {policy!r}")
        budget = budget or Budget()
        limit = max_in_flight or 2 * self._compile_workers
        finished: queue.Queue = queue.Queue()

        def gpu_stage(index: int, work: _Work) -> None:
            try:
                self._gpu_stage(work)
            finally:
                finished.put((index, work))

        def compile_stage(index: int, work: _Work) -> None:
            try:
                self._static_and_compile(work)
            except Exception as exc:  # noqa: BLE001 - a fault of the validator, not the candidate; the rest goes on
                _validator_fault(work.verdict, exc)
                work.needs_gpu = False
            if work.needs_gpu:
                threading.Thread(target=gpu_stage, args=(index, work), daemon=True).start()
            else:
                finished.put((index, work))

        pending = enumerate(items)
        in_flight = 0
        while True:
            while in_flight < limit and (item := next(pending, None)) is not None:
                index, (problem, candidate) = item
                self._compile_pool.submit(compile_stage, index, self._prepare(problem, candidate, policy, budget))
                in_flight += 1
            if not in_flight:
                return
            try:
                wait = None if give_up_at is None else max(0.0, give_up_at - time.perf_counter())
                index, work = finished.get(timeout=wait)
            except queue.Empty:
                return
            in_flight -= 1
            yield index, work.verdict

    def shutdown(self) -> None:
        self._closed = True
        self._compile_pool.shutdown(wait=False, cancel_futures=True)
        for worker in self._workers:
            worker.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # ------------------------------------------------------------ stages

    def _prepare(self, problem, candidate, policy, budget) -> _Work:
        try:
            return _Work(_as_problem(problem), _as_candidate(candidate), policy, budget)
        except InputError as exc:
            work = _Work(Problem(""), Candidate(""), policy, budget)
            work.verdict = Verdict(failure=str(exc), failure_code=FailureCode.BAD_INPUT)
            return work

    def _static_and_compile(self, work: _Work) -> None:
        verdict = work.verdict
        if verdict.failure_code is FailureCode.BAD_INPUT:
            return
        if not self._static_stage(work):
            return
        self._compile_stage(work)

    def _static_stage(self, work: _Work) -> bool:
        verdict, candidate = work.verdict, work.candidate
        verdict.stage = Stage.STATIC
        start = time.monotonic()
        try:
            from .static_checks import check_static
        except ImportError:
            verdict.flags.append("static_checks_unavailable")
            return True
        # The Python module (an empty one too: it must define ModelNew) unless the candidate is a .cu file that no
        # ModelNew module builds, and a .cu candidate's own text (its lines are the file's lines).
        sources = [(candidate.source, candidate.path, False)] if candidate.runnable else []
        if candidate.cu_text:
            sources.append((candidate.cu_text, candidate.cu_path, True))
        errors = []
        for source, path, cuda_file in sources:
            for finding in check_static(source, work.policy, work.problem.source or None, cuda_file=cuda_file):
                severity = "error" if finding.severity == "error" else "flag"
                verdict.diagnostics.append(Diagnostic(finding.line, None, severity,
                                                      f"[{finding.code}] {finding.message}", path))
                if severity == "flag" and finding.code not in verdict.flags:
                    verdict.flags.append(finding.code)
                if severity == "error":
                    errors.append((finding, path))
        verdict.stage_times[Stage.STATIC] = time.monotonic() - start
        if errors:
            first, path = errors[0]
            where = f" ({Path(path).name if path else 'line'} {first.line})" if first.line else ""
            verdict.fail(Stage.STATIC, FailureCode.STATIC,
                         f"rejected by static check '{first.code}'{where}: {first.message}")
            return False
        return True

    def _compile_stage(self, work: _Work) -> None:
        verdict, candidate = work.verdict, work.candidate
        verdict.stage = Stage.COMPILE
        start = time.monotonic()
        specs = candidate.static_specs
        logs, cached = [], bool(specs)
        for spec in specs:
            result = self.builder.build(spec, work.budget.compile_timeout_s)
            logs.append(result.log)
            cached = cached and result.cached
            verdict.details.setdefault("builds", []).append({
                "extension": spec.name, "strategy": result.strategy, "seconds": round(result.seconds, 3),
                "cached": result.cached, "compiled_units": result.compiled_units,
                "unit_seconds": result.unit_seconds})
            verdict.diagnostics += [_relocate(d, candidate) for d in result.diagnostics]
            if not result.ok:
                verdict.compiler_log = "\n".join(logs)
                verdict.stage_times[Stage.COMPILE] = time.monotonic() - start
                if result.timed_out:
                    verdict.fail(Stage.COMPILE, FailureCode.TIMEOUT,
                                 f"compilation of extension '{spec.name}' did not finish within "
                                 f"{work.budget.compile_timeout_s:.0f} s and was killed")
                elif missing := diagnose_build(result.log):
                    _cannot_check(verdict, missing)
                else:
                    first = next((d for d in verdict.diagnostics if d.severity == "error"), None)
                    verdict.fail(Stage.COMPILE, FailureCode.COMPILE_ERROR,
                                 f"extension '{spec.name}' failed to compile" + (
                                     f": line {first.line}: {first.message}" if first and first.line else
                                     f": {first.message}" if first else "; see the compiler log"))
                return
            if result.so_path:
                work.prebuilt[spec.content_key()] = {"module_name": result.module_name, "so_path": result.so_path}
            for text in spec.cuda_sources:
                work.kernel_names += GLOBAL_KERNEL.findall(text)
        verdict.compiler_log = "\n".join(logs)
        verdict.cached_build = cached
        verdict.stage_times[Stage.COMPILE] = time.monotonic() - start
        if not specs and not candidate.specs_complete:
            verdict.flags.append("extension_built_at_import")
        if not candidate.runnable or not self.has_gpu:
            if unchecked := _left_to_the_device(candidate):  # a compile stage that checked nothing did not pass
                verdict.fail(Stage.COMPILE, FailureCode.ENVIRONMENT, f"{NOT_CHECKED_HERE}: {unchecked}")
                return
            self._compile_only(verdict, candidate.not_run_reason or NO_DEVICE)
            return
        work.needs_gpu = True

    @staticmethod
    def _compile_only(verdict: Verdict, reason: str) -> None:
        verdict.stage = Stage.COMPILE
        verdict.passed = True
        verdict.compile_only = True
        verdict.details["not_run"] = reason

    def _gpu_stage(self, work: _Work) -> None:
        verdict, budget = work.verdict, work.budget
        verdict.stage = Stage.CORRECT
        job = {
            "problem_source": work.problem.source, "problem_path": work.problem.path,
            "problem_class": work.problem.class_name, "candidate_source": work.candidate.source,
            "candidate_path": work.candidate.path, "candidate_class": work.candidate.class_name,
            "cu_path": work.candidate.cu_path, "cu_text": work.candidate.cu_text, "prebuilt": work.prebuilt,
            "kernel_names": sorted(set(work.kernel_names)), "policy": work.policy, "device": self.device,
            "budget": asdict(budget), "seed": budget.seed if budget.seed is not None else secrets.randbits(48),
            "compile_config": compile_config_job(self.compile_config),
        }
        worker = self._idle.get()
        modules = {entry["module_name"]: entry["so_path"] for entry in work.prebuilt.values()}
        fresh = False
        if any(worker.loaded_modules.get(name, path) != path for name, path in modules.items()):
            worker, fresh = self._swap(worker), True
        worker.loaded_modules.update(modules)
        start = time.monotonic()
        try:
            result = worker.run_job(job, budget.total_timeout_s + budget.compile_timeout_s)
        except WorkerError as exc:
            _worker_failed(verdict, exc)
            verdict.stage_times["gpu"] = time.monotonic() - start
            self._replace(worker)
            return
        fresh = fresh or worker.last_start_s > FRESH_WORKER_WAIT_S
        if result.get("failure_code") in FRESH_WORKER_FAILURES:
            # A name the worker had imported from another build, or a worker out of thread keys: judge the
            # candidate again in a fresh process.
            worker, fresh = self._swap(worker), True
            try:
                result = worker.run_job(job, budget.total_timeout_s + budget.compile_timeout_s)
            except WorkerError as exc:
                _worker_failed(verdict, exc)
                self._replace(worker)
                return
        if result.get("recycle") or worker.jobs_done >= self.MAX_JOBS_PER_WORKER:
            self._replace(worker)
        else:
            self._idle.put(worker)
        _merge_result(verdict, result)
        verdict.stage_times["gpu"] = time.monotonic() - start
        # Whether this verdict waited for a worker process to start (torch import + CUDA init, seconds).
        verdict.details["fresh_worker"] = fresh

    def _swap(self, worker: WorkerProcess) -> WorkerProcess:
        """A fresh worker in place of an idle one, for the caller's own use (not put back in the idle queue)."""
        worker.kill()
        self.worker_swaps += 1
        fresh = WorkerProcess(gpu_index=worker.gpu_index)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def _replace(self, worker: WorkerProcess) -> None:
        """Discard a worker (hung, crashed or with a broken CUDA context) and start a fresh one in the background."""
        worker.kill()
        self.worker_replacements += 1
        fresh = WorkerProcess(gpu_index=worker.gpu_index)
        self._workers[self._workers.index(worker)] = fresh
        if not self._closed:
            threading.Thread(target=self._start_quietly, args=(fresh,), daemon=True).start()
        self._idle.put(fresh)


def _relocate(diagnostic: Diagnostic, candidate: Candidate) -> Diagnostic:
    if diagnostic.file is None and diagnostic.line is not None:
        diagnostic.file = candidate.display_path
    return diagnostic


def compile_config_job(config: CompileConfig) -> dict:
    """A CompileConfig as JSON (the harness and the server's validation worker rebuild it: CompileConfig(**job))."""
    return {**asdict(config), "cache_dir": str(config.cache_dir)}


def _merge_result(verdict: Verdict, result: dict) -> None:
    """The harness's outcome (see harness._run_job) into the verdict."""
    verdict.flags += [f for f in result["flags"] if f not in verdict.flags]
    verdict.stage_times.update(result["stage_times"])
    verdict.details.update(result["details"])
    verdict.max_abs_error = result.get("max_abs_error", verdict.max_abs_error)
    verdict.max_rel_error = result.get("max_rel_error", verdict.max_rel_error)
    if result["passed"]:
        verdict.passed, verdict.stage = True, Stage(result["stage"])
        verdict.speedup = result.get("speedup")
        verdict.timing = {k: TimingStats(**v) for k, v in result.get("timing", {}).items()}
        if result.get("mean_speedup") is not None:
            verdict.details["mean_speedup"] = result["mean_speedup"]
        return
    verdict.fail(Stage(result["stage"]), FailureCode(result["failure_code"]), result["failure"])
    if result.get("compiler_log"):
        verdict.compiler_log += result["compiler_log"]
    verdict.diagnostics += [Diagnostic(**d) for d in result.get("diagnostics", [])]
    if result.get("traceback"):
        verdict.details["traceback"] = result["traceback"]
    if result.get("environment"):
        verdict.details["environment"] = result["environment"]


def _left_to_the_device(candidate: Candidate) -> str | None:
    """Why compiling here did not check the candidate's kernels (only running it builds them, on a CUDA
    device), or None when every extension it builds was compiled."""
    if candidate.unresolved_calls:
        return (f"{'its extension is' if len(candidate.unresolved_calls) == 1 else 'some of its extensions are'} "
                f"built from values known only when the module runs ({'; '.join(candidate.unresolved_calls)}), so "
                f"it was not compiled here; a machine with a CUDA device builds and checks it as the candidate runs")
    if not candidate.static_specs:
        return ("it builds no CUDA extension: its kernels (Triton's, or PyTorch's own) are compiled when they first "
                "run, on a CUDA device, and this machine has none")
    return None


def _cannot_check(verdict: Verdict, missing) -> None:
    """A build that failed for want of a piece of this machine (environment.MissingPiece): not the kernel's fault."""
    verdict.fail(Stage.COMPILE, FailureCode.ENVIRONMENT, f"{NOT_CHECKED_HERE}: {missing.message}")
    verdict.details["environment"] = missing.to_dict()


def _worker_failed(verdict: Verdict, exc: WorkerError) -> None:
    """A worker that stopped answering: the candidate's fault once its job ran, the machine's while it started."""
    if exc.phase == STARTUP_PHASE:
        verdict.fail(Stage.CORRECT, FailureCode.VALIDATOR_ERROR,
                     f"the worker process could not start, so nothing of the candidate ran: {exc}")
    elif exc.kind is FailureCode.TIMEOUT:
        verdict.fail(exc.stage or Stage.CORRECT, FailureCode.TIMEOUT,
                     f"the candidate did not finish '{exc.phase}' within its time limit (a hang or an infinite "
                     f"loop?); its worker was killed and replaced")
    else:
        verdict.fail(exc.stage or Stage.CORRECT, FailureCode.CRASH, f"the candidate crashed the worker process: {exc}")


def _validator_fault(verdict: Verdict, exc: Exception) -> None:
    """An exception of the validator's own (not of the candidate) during the static or compile stage."""
    if missing := diagnose_build(str(exc)):  # e.g. no nvcc to start at all
        _cannot_check(verdict, missing)
    else:
        verdict.fail(verdict.stage or Stage.STATIC, FailureCode.VALIDATOR_ERROR,
                     f"internal validator error: {type(exc).__name__}: {exc}")


_default_pool: ValidatorPool | None = None
_default_pool_lock = threading.Lock()


def default_pool() -> ValidatorPool:
    """A process-wide pool so repeated `validate` calls reuse warm workers and the build cache."""
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None:
            _default_pool = ValidatorPool()
            atexit.register(_default_pool.shutdown)
        return _default_pool


def validate(problem, candidate, policy: str = "ide", budget: Budget | None = None,
             pool: ValidatorPool | None = None) -> Verdict:
    """Validate one candidate against one problem. Strings are source text, pathlib.Path objects are files.
    Candidate code never runs in this process."""
    return (pool or default_pool()).validate(problem, candidate, policy, budget)
