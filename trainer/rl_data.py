"""RL tasks: JSONL task files -> DICE prompts, filtered by prompt length once, taken in file order (easy -> hard).

Stage 1 (infill) tasks carry the ModelNew skeleton around the CUDA source (`prefix`, `suffix`) and use DICE's
kernel-infilling prompt; stage 2 (e2e) tasks carry only the PyTorch module and use the end-to-end prompt. CuKe
writes both files ordered easy -> hard, and step s takes tasks [s*T, (s+1)*T) modulo the task count, so a run
goes from single ops to fused chains as DICE's sequential schedule does (docs/decoding.md#bic-rl).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .jsonl import json_objects


class RLDataError(ValueError):
    """Bad RL task data (missing file, a task without its fields, nothing left after filtering)."""


@dataclass(frozen=True)
class RLTask:
    id: str
    pytorch_code: str
    prompt: str
    # Infill tasks: the candidate file is prefix + the model's CUDA source + suffix.
    prefix: str = ""
    suffix: str = ""


@dataclass
class RLDataStats:
    records: int
    kept: int
    dropped_too_long: int
    longest_prompt_tokens: int
    # Infill records with neither prefix nor suffix (CuKe's held-out rows whose kernel it could not split).
    dropped_no_skeleton: int = 0


def check_task_files(files: list[str]) -> None:
    if not files:
        raise RLDataError("no task_files given: point them at CuKe's infill_tasks.jsonl or e2e_tasks.jsonl "
                          "(`dice-copilot train cuke build --out cuke/`)")
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise RLDataError(f"task file(s) not found: {', '.join(missing)}")


def task_from_record(record: dict, stage: str, where: str) -> RLTask:
    """An RLTask of `stage` ("infill" or "e2e") from one JSONL record."""
    from dice_copilot.model.prompts import end_to_end_prompt, infill_prompt

    needed = ("pytorch_code", "prefix", "suffix") if stage == "infill" else ("pytorch_code",)
    absent = [k for k in needed if not isinstance(record.get(k), str) or (k == "pytorch_code" and not record[k])]
    if absent:
        raise RLDataError(f"{where}: a {stage} task needs string field(s) {list(needed)}; missing or not a string: "
                          f"{absent}")
    task_id = str(record.get("id", record.get("idx", where)))
    code = record["pytorch_code"]
    if stage == "infill":
        return RLTask(task_id, code, infill_prompt(code, record["prefix"], record["suffix"]), record["prefix"],
                      record["suffix"])
    return RLTask(task_id, code, end_to_end_prompt(code))


def load_rl_tasks(files: list[str], stage: str, tokenizer, max_prompt_tokens: int) -> tuple[list[RLTask], RLDataStats]:
    """The tasks of `files` in order, less those whose prompt is over `max_prompt_tokens` tokens (and, for infill,
    those without a skeleton)."""
    check_task_files(files)
    tasks, records, dropped, longest, unsplit = [], 0, 0, 0, 0
    for path in files:
        for where, record in json_objects(Path(path), RLDataError):
            records += 1
            task = task_from_record(record, stage, where)
            if stage == "infill" and not task.prefix and not task.suffix:
                unsplit += 1
                continue
            length = len(tokenizer.encode(task.prompt))
            longest = max(longest, length)
            if length > max_prompt_tokens:
                dropped += 1
                continue
            tasks.append(task)
    if not tasks:
        raise RLDataError(f"no task left of {records} in {', '.join(files)}: {dropped} with a prompt longer than "
                          f"max_prompt_tokens = {max_prompt_tokens} (the longest has {longest} tokens), {unsplit} "
                          f"infill records without a prefix or suffix")
    return tasks, RLDataStats(records, len(tasks), dropped, longest, unsplit)


def tasks_for_step(tasks: list[RLTask], step: int, per_step: int) -> list[RLTask]:
    """Step `step`'s tasks (0-based): the next `per_step` of the file order, wrapping around."""
    return tasks_from(tasks, step * per_step, per_step)


def tasks_from(tasks: list[RLTask], first: int, count: int) -> list[RLTask]:
    """`count` tasks of the file order from task `first` on (counted over every pass), wrapping around."""
    return [tasks[(first + i) % len(tasks)] for i in range(count)]
