"""Infill on the held-out user-style set (bench/heldout_user_style) through the real language server over LSP: every
`__global__` body of every solution.py blanked in turn (signature and braces kept, the hole where the body was;
the requests of bench/model_eval.py's infill, which scores the engine without the server), one invoked inline
completion at the hole, answered by the checkpoint's own suggestions (nothing injected). Prints the share of
requests that got a validated suggestion and the latency to the answer (p50/p95), per problem with --per-problem,
and writes every request to --out as JSON.

The bench writes a workspace the way the server finds a reference: NN_name/problem.py (the set's reference) and,
per kernel, the blanked solution as NN_name/problem_kernel.py, problem_kernel_2.py, ... (the names the server gives
generated kernels, whose reference is problem.py beside them).

Without a CUDA device the server's verdicts stop after compiling: a suggestion then only compiles, and the table
and the JSON count it as compile-checked, never as validated.

    python bench/infill_heldout.py --out results/infill_heldout.json [--checkpoint PATH] [--problems 07 36]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# bench/ is the script's folder: its siblings import as top-level modules.
from model_eval import InfillRequest, infill_requests, user_problems
from server_latency import (close_document, invoked_request, last_status, open_document, percentile, start_server,
                            stop_server, wait_for_checkpoint)

from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV
from dice_copilot.server.context import new_kernel_path, offset_to_position

SET = Path(__file__).resolve().parent / "heldout_user_style"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the embedded default)")
    parser.add_argument("--problems", nargs="+", default=[], metavar="PREFIX",
                        help="only problems whose folder names start with these (default: all)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="start no request after this long; requests not reached are counted as such")
    parser.add_argument("--device", default="auto", help="model device (default auto: cuda when present)")
    parser.add_argument("--candidates", type=int, default=None,
                        help="diceCopilot.maxCandidates (default: the checkpoint's decoding default)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="diceCopilot.maxNewTokens (default: the checkpoint's decoding default)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="invoked budget per request")
    parser.add_argument("--load-timeout-s", type=float, default=600.0)
    parser.add_argument("--per-problem", action="store_true", help="also print one row per problem")
    args = parser.parse_args(argv)

    requests = [request for problem in user_problems(SET)
                if not args.problems or any(problem.name.startswith(prefix) for prefix in args.problems)
                for request in infill_requests(problem)]
    if not requests:
        print(f"no problem in {SET} starts with {' or '.join(args.problems)}", file=sys.stderr)
        return 2
    results = asyncio.run(measure(requests, args))
    print(table(results, per_problem=args.per_problem))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


def blanked(request: InfillRequest) -> tuple[str, int]:
    """The solution with the kernel's body removed, and the offset of the hole (just after the body's `{`)."""
    return request.prefix + request.suffix, len(request.prefix)


def write_workspace(requests: list[InfillRequest], workspace: Path) -> list[Path]:
    """Each problem's reference as NN_name/problem.py and, per request, its blanked solution beside it."""
    paths = []
    for request in requests:
        reference = workspace / request.problem.name / "problem.py"
        reference.parent.mkdir(parents=True, exist_ok=True)
        reference.write_text(request.problem.reference, encoding="utf-8")
        path = new_kernel_path(reference)
        path.write_text(blanked(request)[0], encoding="utf-8")
        paths.append(path)
    return paths


async def measure(requests: list[InfillRequest], args) -> dict:
    settings = {"checkpoint": args.checkpoint, "device": args.device, "maxCandidates": args.candidates,
                "maxNewTokens": args.max_new_tokens, "invokedBudgetMs": int(args.budget_s * 1000)}
    with tempfile.TemporaryDirectory(prefix="dice-infill-heldout-") as folder:
        return await measure_in(requests, Path(folder), settings, args)


async def measure_in(requests: list[InfillRequest], workspace: Path, settings: dict, args) -> dict:
    paths = write_workspace(requests, workspace)
    # Nothing injected: the server never sees the test-only scripted-completions hook.
    env = {name: value for name, value in os.environ.items() if name != SCRIPTED_COMPLETIONS_ENV}
    started = time.perf_counter()
    client = await start_server(settings, workspace, env)
    rows = []
    try:
        load_s = await wait_for_checkpoint(client, args.load_timeout_s)
        for version, (request, path) in enumerate(zip(requests, paths), 1):
            if args.max_seconds is not None and time.perf_counter() - started > args.max_seconds:
                break
            row = await one_request(client, request, path, version)
            rows.append(row)
            print(f"  {request.problem.name} {request.kernel}: {row['items']} item(s) in {row['latency_s']:.2f}s "
                  f"({row['reason']})", flush=True)
        machine = last_status(client)
    finally:
        await stop_server(client)
    return summary(requests, rows, load_s, machine, args)


async def one_request(client, request: InfillRequest, path: Path, version: int) -> dict:
    """One invoked completion at the hole of a blanked kernel: what came back, how long it took and why."""
    text, hole = blanked(request)
    line, character = offset_to_position(text, hole)
    open_document(client, path, text, version)
    seen = len(client.notifications)
    t0 = time.perf_counter()
    result = await client.text_document_inline_completion_async(invoked_request(path, line, character))
    latency_s = time.perf_counter() - t0
    items = list(result.items) if result else []
    answered = [params for method, params in client.notifications[seen:]
                if method == "diceCopilot/status" and getattr(params, "uri", None) == path.as_uri()]
    status = answered[-1] if answered else None
    reason = getattr(status, "reason", None) or "noStatus"
    if reason == "timeout":  # the job goes on: let it end before the next request, so requests never overlap
        await job_end(client, path.as_uri(), getattr(status, "jobId", None), seen)
    logs = [getattr(params, "message", "") for method, params in client.notifications[seen:]
            if method == "window/logMessage"]
    close_document(client, path)
    verdicts = [item_verdict(item) for item in items]
    # Without a CUDA device a suggestion only compiled: it is never counted as validated.
    compile_only = all(v.get("compileOnly") for v in verdicts) if verdicts else getattr(status, "compileOnly", None)
    return {
        "problem": request.problem.name, "kernel": request.kernel, "file": path.name, "line": line,
        "character": character, "items": len(items), "compile_only": compile_only,
        "latency_s": latency_s, "reason": reason, "message": getattr(status, "message", None),
        "server_log": logs,  # the job's steps, each candidate's verdict among them
    }


def item_verdict(item) -> dict:
    """The verdict the server attached to a suggestion (its accept command's argument)."""
    argument = item.command.arguments[0] if item.command and item.command.arguments else {}
    argument = argument if isinstance(argument, dict) else argument._asdict()
    verdict = argument.get("verdict") or {}
    return verdict if isinstance(verdict, dict) else verdict._asdict()


async def job_end(client, uri: str, job_id: str | None, seen: int, timeout_s: float = 3600.0) -> None:
    """Wait for the end of a job that outlived its request: a suggestionReady for the document, or a later status
    for the job."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        for method, params in client.notifications[seen:]:
            if method == "diceCopilot/suggestionReady" and getattr(params, "uri", None) == uri:
                return
            if (method == "diceCopilot/status" and job_id and getattr(params, "jobId", None) == job_id
                    and getattr(params, "reason", None) != "timeout"):
                return
        await asyncio.sleep(0.2)


def summary(requests: list[InfillRequest], rows: list[dict], load_s: float, machine, args) -> dict:
    def latency(selected: list[dict]) -> dict:
        values = [row["latency_s"] for row in selected]
        return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}

    def counts(selected: list[dict]) -> dict:
        suggested = [row for row in selected if row["items"]]
        validated = [row for row in suggested if not row["compile_only"]]
        return {"requests": len(selected), "validated": len(validated),
                "compile_checked_only": len(suggested) - len(validated),
                "validated_share": len(validated) / len(selected) if selected else None,
                "suggested_share": len(suggested) / len(selected) if selected else None,
                "latency_s": latency(selected), "latency_with_suggestion_s": latency(suggested)}

    reasons: dict[str, int] = {}
    for row in rows:
        reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
    gpu = bool(getattr(machine, "gpu", False))
    problems = sorted({row["problem"] for row in rows})
    return {
        "set": "heldout_user_style", "checkpoint": args.checkpoint or "default",
        "untrained": getattr(machine, "untrained", None), "device": args.device,
        "mode": "gpu" if gpu else "compile-only",
        "candidates": args.candidates, "max_new_tokens": args.max_new_tokens, "budget_s": args.budget_s,
        "load_s": load_s, "requests_total": len(requests), "not_reached": len(requests) - len(rows),
        **counts(rows), "reasons": reasons,
        "per_problem": {name: counts([row for row in rows if row["problem"] == name]) for name in problems},
        "rows": rows,
    }


def table(results: dict, per_problem: bool = False) -> str:
    def seconds(value):
        return "n/a" if value is None else f"{value:.2f} s"

    def share(part: dict):
        if not part["requests"]:
            return "n/a"
        if results["mode"] == "gpu":
            return f"{part['validated']}/{part['requests']} ({part['validated_share']:.0%})"
        return f"{part['compile_checked_only']}/{part['requests']} compile-checked"

    header = ("problem", "requests", "validated" if results["mode"] == "gpu" else "suggested (compile-only)",
              "p50", "p95")
    rows = [("all", str(results["requests"]), share(results), seconds(results["latency_s"]["p50"]),
             seconds(results["latency_s"]["p95"]))]
    if per_problem:
        rows += [(name, str(part["requests"]), share(part), seconds(part["latency_s"]["p50"]),
                  seconds(part["latency_s"]["p95"])) for name, part in results["per_problem"].items()]
    width = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    lines = [f"== infill on the held-out user-style set: checkpoint {results['checkpoint']}"
             + (" (untrained)" if results["untrained"] else "") + " =="]
    if results["mode"] != "gpu":
        lines.append("compile-only: no CUDA device, so a suggestion was compiled, not run: none counts as validated")
    lines += [" | ".join(c.ljust(w) for c, w in zip(header, width)), "-+-".join("-" * w for w in width)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, width)) for row in rows]
    lines.append(f"latency is to the answer, empty or not (with a suggestion: p50 "
                 f"{seconds(results['latency_with_suggestion_s']['p50'])}, p95 "
                 f"{seconds(results['latency_with_suggestion_s']['p95'])}); reasons: {results['reasons']}; "
                 f"checkpoint load {results['load_s']:.1f} s"
                 + (f"; {results['not_reached']} request(s) not reached within --max-seconds"
                    if results["not_reached"] else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
