"""Caller-side handle on one worker process: candidate code only ever runs there. Length-prefixed JSON over a
private pipe pair, phase deadlines announced by the harness, and a SIGKILL of the whole process group on timeout."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .verdict import FailureCode, Stage, ValidatorError

SECRET_ENV = "DICE_VALIDATOR_SECRET"
FDS_ENV = "DICE_VALIDATOR_FDS"
# Failures that say nothing of the candidate (a module name this process imported from another build, no thread keys
# left): the pool judges the candidate again in a fresh worker.
FRESH_WORKER_FAILURES = (FailureCode.STALE_EXTENSION, FailureCode.WORKER_EXHAUSTED)
STARTUP_TIMEOUT_S = 120.0
STARTUP_PHASE = "startup"  # the phase of a worker that has not answered its first message yet


class WorkerError(ValidatorError):
    """The worker stopped answering: it crashed, hung past a deadline, or was killed."""

    def __init__(self, kind: FailureCode, message: str, phase: str | None = None, stage: Stage | None = None):
        super().__init__(message)
        self.kind = kind  # FailureCode.TIMEOUT | FailureCode.CRASH
        self.phase = phase
        self.stage = stage  # the stage of the phase it stopped in (None: before the harness announced one)


def write_message(fd: int, obj) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack("<I", len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, remaining = [], n
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError()
        chunk = os.read(fd, remaining)
        if not chunk:
            raise EOFError()
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: float | None = None):
    (length,) = struct.unpack("<I", read_exact(fd, 4, deadline))
    return json.loads(read_exact(fd, length, deadline))


@dataclass
class WorkerProcess:
    """One spawned harness process, pinned to one GPU (or none)."""

    gpu_index: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    jobs_done: int = 0
    device_name: str | None = None
    # Extension modules this process has imported, name -> .so path. A process keeps the first module imported
    # under a name, so a different binary with the same name needs a fresh worker.
    loaded_modules: dict[str, str] = field(default_factory=dict)
    # Seconds the last run_job waited for this process to start (its own spawn, or a warm-up still in progress);
    # about zero when it was already running.
    last_start_s: float = 0.0
    _start_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> None:
        """Spawn the harness (idempotent: a background warm-up and a first job may race to start it)."""
        with self._start_lock:
            if not self.alive:
                self._spawn()

    def _spawn(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = dict(os.environ, **self.env)
        env[SECRET_ENV] = secrets.token_hex(16)
        env[FDS_ENV] = f"{req_r},{resp_w}"
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu_index)
        self._log = tempfile.NamedTemporaryFile(prefix="dice-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dice_copilot.validator.harness"], env=env, pass_fds=(req_r, resp_w),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        os.close(req_r)
        os.close(resp_w)
        self._req, self._resp = req_w, resp_r
        hello = self._receive(time.monotonic() + STARTUP_TIMEOUT_S, STARTUP_PHASE, None)
        self.device_name = hello.get("device")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run_job(self, job: dict, total_timeout_s: float, on_event=None) -> dict:
        """Send a job and wait for its result; each phase the harness announces carries its own time budget and
        the stage it belongs to."""
        started = time.monotonic()
        self.start()
        self.last_start_s = time.monotonic() - started
        hard_deadline = time.monotonic() + total_timeout_s
        try:
            write_message(self._req, {"op": "validate", **job})
        except OSError as exc:
            raise WorkerError(FailureCode.CRASH, f"worker process is gone ({exc})") from exc
        phase, stage, phase_deadline = "start", None, hard_deadline
        while True:
            message = self._receive(min(phase_deadline, hard_deadline), phase, stage)
            if message.get("event") == "phase":
                phase, stage = message["phase"], Stage(message["stage"])
                phase_deadline = time.monotonic() + float(message["budget_s"])
                if on_event:
                    on_event(message)
            elif message.get("event") == "result":
                self.jobs_done += 1
                return message

    def _receive(self, deadline: float, phase: str, stage: Stage | None):
        try:
            return read_message(self._resp, deadline)
        except TimeoutError:
            self.kill()
            raise WorkerError(FailureCode.TIMEOUT, f"no answer within the time limit during '{phase}'", phase,
                              stage) from None
        except (EOFError, OSError, ValueError):
            code = self.proc.wait(timeout=10) if self.proc else None
            tail = self.log_tail()
            self.kill()
            raise WorkerError(FailureCode.CRASH, f"worker died during '{phase}' ({_describe_exit(code)}); "
                                                 f"last output: {tail}", phase, stage) from None

    def log_tail(self, limit: int = 1500) -> str:
        with contextlib.suppress(OSError):
            text = Path(self._log.name).read_text(errors="replace")
            return text[-limit:].strip()
        return ""

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (compilers and anything the candidate spawned included)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for fd in (getattr(self, "_req", None), getattr(self, "_resp", None)):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._req = self._resp = None
        self.proc = None
        with contextlib.suppress(OSError, AttributeError):
            os.unlink(self._log.name)

    def shutdown(self) -> None:
        if self.alive:
            with contextlib.suppress(OSError):
                write_message(self._req, {"op": "exit"})
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
