"""Job machinery of the language server: the single-consumer engine queue (priority, cancelled jobs dropped) and
killing a validation process tree, grandchildren in their own sessions included."""

import asyncio
import subprocess
import sys
import threading
import time

import psutil
import pytest

from dice_copilot.server.jobs import (PRIORITY_INFILL, PRIORITY_KERNEL, EngineQueue, Job, JobCancelled,
                                      kill_process_tree, wait_with_budget)


async def test_engine_queue_runs_one_call_at_a_time_generation_first_and_drops_cancelled_jobs():
    queue = EngineQueue()
    order, running = [], []
    gate = threading.Event()

    def call(name):
        def run():
            running.append(name)
            assert len(running) == 1  # never two engine calls at once
            if name == "first":
                gate.wait(5)
            order.append(name)
            running.remove(name)
            return name
        return run

    first = asyncio.ensure_future(queue.run(Job("infill", "u"), PRIORITY_INFILL, call("first")))
    await asyncio.sleep(0.05)
    infill = asyncio.ensure_future(queue.run(Job("infill", "u"), PRIORITY_INFILL, call("infill")))
    cancelled_job = Job("infill", "u")
    dropped = asyncio.ensure_future(queue.run(cancelled_job, PRIORITY_INFILL, call("dropped")))
    kernel = asyncio.ensure_future(queue.run(Job("kernel", "u"), PRIORITY_KERNEL, call("kernel")))
    await asyncio.sleep(0.05)
    cancelled_job.cancel("superseded")
    gate.set()
    assert await first == "first" and await kernel == "kernel" and await infill == "infill"
    with pytest.raises(JobCancelled):
        await dropped
    assert order == ["first", "kernel", "infill"]
    queue.shutdown()


async def test_wait_with_budget_leaves_the_work_running():
    work = asyncio.ensure_future(asyncio.sleep(0.2, result="done"))
    assert await wait_with_budget(work, 0.01) == (False, None)
    assert await work == "done"


def test_kill_process_tree_reaches_grandchildren_in_other_sessions():
    script = ("import subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = psutil.Process(parent.pid).children()[0]
    killed = kill_process_tree(parent.pid)
    assert set(killed) == {parent.pid, grandchild.pid}
    parent.wait(5)

    def gone(process):
        try:
            return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(grandchild)


def test_batch_validation_keeps_order_and_fails_an_unreadable_candidate_alone(monkeypatch):
    from dice_copilot.server import backend
    from dice_copilot.validator import Verdict

    seen = []

    class FakePool:
        def validate_many(self, items, policy, budget):
            seen.extend(candidate.source for _, candidate in items)
            return [Verdict(passed=True, stage="compile", compile_only=True) for _ in items]

    monkeypatch.setattr(backend, "_pool", lambda validator, nvcc, compile_only: FakePool())
    good = "import torch\nx = 1\n"
    request = {"candidates": [{"source": good, "path": "a.py"}, {"source": "def broken(:\n", "path": "a.py"},
                              {"source": good + "y = 2\n", "path": "a.py"}], "problem": None, "policy": "ide"}
    verdicts = backend.run_validation(request)
    assert [v["passed"] for v in verdicts] == [True, False, True]
    assert verdicts[1]["failure_code"] == "bad_input" and "a.py" in verdicts[1]["failure"]
    assert seen == [good, good + "y = 2\n"]  # only the readable ones reached the validator, in order
    assert verdicts[0]["details"]["not_run"] == backend.NO_REFERENCE
