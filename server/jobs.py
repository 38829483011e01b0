"""Job machinery: the single-consumer engine queue (generation before infill), the killable validation worker and the
`Job` handle that ties a cancel flag to both."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import psutil

PRIORITY_KERNEL = 0  # whole-kernel generation, asked for explicitly, goes first
PRIORITY_INFILL = 1


class JobCancelled(Exception):
    """The job was superseded or cancelled; `reason` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_job_ids = itertools.count(1)


@dataclass
class Job:
    """One infill or generation: a cancel flag the engine polls, and hooks that kill its subprocesses."""

    kind: str  # "infill" or "kernel"
    uri: str
    key: str = ""
    id: str = field(default_factory=lambda: f"job-{next(_job_ids)}")
    cancel_event: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str | None = None
    task: asyncio.Task | None = None
    kill_hooks: list[Callable[[], None]] = field(default_factory=list)
    state: str = "queued"

    def cancel(self, reason: str) -> bool:
        """Stop the job now: the engine stops at its next denoising pass, validation subprocesses are killed."""
        if self.cancel_event.is_set() or (self.task is not None and self.task.done()):
            return False
        self.cancel_reason = reason
        self.cancel_event.set()
        for hook in list(self.kill_hooks):
            hook()
        return True

    def check(self) -> None:
        if self.cancel_event.is_set():
            raise JobCancelled(self.cancel_reason or "cancelled")


class EngineQueue:
    """Every engine call runs on one thread, one at a time (the GPU is a single consumer); queued calls start in
    priority order, and a queued call whose job was cancelled is dropped before it starts."""

    def __init__(self):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dice-engine")
        self._queue: asyncio.PriorityQueue | None = None
        self._consumer: asyncio.Task | None = None
        self._order = itertools.count()
        self.busy_job: str | None = None

    async def run(self, job: Job, priority: int, call: Callable[[], Any]) -> Any:
        if self._queue is None:
            self._queue = asyncio.PriorityQueue()
            self._consumer = asyncio.ensure_future(self._consume())
        result: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._queue.put((priority, next(self._order), job, call, result))
        return await result

    async def _consume(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            _, _, job, call, result = await self._queue.get()
            if result.done():
                continue
            if job.cancel_event.is_set():
                result.set_exception(JobCancelled(job.cancel_reason or "cancelled"))
                continue
            self.busy_job = job.id
            try:
                value = await loop.run_in_executor(self._executor, call)
            except BaseException as error:  # handed to the waiting job, never lost
                if not result.done():
                    result.set_exception(error)
            else:
                if not result.done():
                    result.set_result(value)
            finally:
                self.busy_job = None

    def shutdown(self) -> None:
        if self._consumer is not None:
            self._consumer.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


def kill_process_tree(pid: int) -> list[int]:
    """SIGKILL a process, its process group and every descendant (compilers and candidate runners may start their
    own sessions, so the group alone is not enough). Returns the pids signalled."""
    try:
        root = psutil.Process(pid)
        victims = root.children(recursive=True) + [root]
    except psutil.Error:
        victims = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = []
    for process in victims:
        try:
            process.kill()
            killed.append(process.pid)
        except psutil.Error:
            pass
    return killed


class ValidationService:
    """The validation worker process (validation_worker.py) seen from the server: one request at a time; a job's
    cancellation kills the worker's whole process tree, and the next request starts a fresh worker. The worker runs
    in the environment its requests name (`worker_env`, backend.worker_environment): a request that names another
    one restarts it."""

    def __init__(self, log: Callable[[str], None]):
        self._process: asyncio.subprocess.Process | None = None
        self._env: dict[str, str] = {}  # what the running worker was started with, beyond the server's own
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._log = log
        self.current_job: str | None = None
        self.kills = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.returncode is None else None

    async def start(self) -> None:
        """Start the worker (and import the validator there) ahead of the first request."""
        async with self._lock:
            await self._ensure_started({}, None)

    async def _ensure_started(self, env: dict[str, str], compile_config: dict | None) -> asyncio.subprocess.Process:
        if self._process is not None and self._process.returncode is None:
            if env == self._env:
                return self._process
            self._log(f"restarting the validation worker for new nvcc settings ({', '.join(sorted(env)) or 'none'})")
            kill_process_tree(self._process.pid)
        self._env = env
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dice_copilot.server.validation_worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True, limit=64 * 1024 * 1024, env={**os.environ, **env})
        self._log(f"validation worker started (pid {self._process.pid})")
        reply = await self._exchange(self._process, {"ping": True, "compile_config": compile_config})
        if not reply.get("pong"):
            raise RuntimeError(f"validation worker did not start: {reply}")
        return self._process

    async def _exchange(self, process: asyncio.subprocess.Process, message: dict) -> dict:
        process.stdin.write((json.dumps(message) + "\n").encode("utf-8", errors="surrogatepass"))
        await process.stdin.drain()
        line = await process.stdout.readline()
        if not line:
            raise ConnectionError("validation worker exited")
        return json.loads(line)

    async def validate(self, job: Job, request: dict) -> list[dict]:
        """The verdict JSONs of the request's candidates; raises JobCancelled when the job is cancelled meanwhile
        (the worker is killed then) and RuntimeError when the worker fails."""
        async with self._lock:
            job.check()
            process = await self._ensure_started(request.get("worker_env", {}), request.get("compile_config"))
            job.check()

            def kill() -> None:
                if self.current_job == job.id and process.returncode is None:
                    self.kills += 1
                    pids = kill_process_tree(process.pid)
                    self._log(f"killed validation worker pid {process.pid} and {len(pids) - 1} child process(es): "
                              f"{job.id} {job.cancel_reason}")

            job.kill_hooks.append(kill)
            self.current_job = job.id
            try:
                message = {key: value for key, value in request.items() if key != "worker_env"}
                reply = await self._exchange(process, {**message, "id": next(self._ids)})
            except (ConnectionError, BrokenPipeError, ConnectionResetError, json.JSONDecodeError) as error:
                self._process = None
                job.check()
                raise RuntimeError(f"validation worker failed: {error}") from error
            finally:
                self.current_job = None
                job.kill_hooks.remove(kill)
            if "error" in reply:
                raise RuntimeError(reply["error"])
            return reply["verdicts"]

    def shutdown(self) -> None:
        if self._process is not None and self._process.returncode is None:
            kill_process_tree(self._process.pid)


async def wait_with_budget(work: Awaitable, budget_s: float) -> tuple[bool, Any]:
    """(True, result) when `work` finishes within the budget, else (False, None); the work itself keeps running."""
    try:
        return True, await asyncio.wait_for(asyncio.shield(work), timeout=budget_s)
    except asyncio.TimeoutError:
        return False, None
