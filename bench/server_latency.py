"""Language-server latency on a GPU machine: inline completion with the default (or a given) checkpoint, through the
real server process over LSP — time to the first validated item (p50/p95), cache-hit and fast-path latency, and the
memory of the server process. Prints a table against the targets (cache hit < 20 ms, validated infill p50 < 1.5 s)
and writes the numbers as JSON to --out.

Two phases, each with its own server: "model" (the checkpoint decodes the infill; an untrained checkpoint may give no
validated item, and the table then says so), and "scripted" (known-good middles injected through the test-only
DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS hook: the same pipeline minus decoding, i.e. splice + validation + server
overhead on this GPU).

    python bench/server_latency.py --out results/server_latency.json [--checkpoint PATH] [--rounds 3]
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

import psutil
from lsprotocol import types
from pygls.lsp.client import LanguageClient

# Small problems written for this benchmark: a reference module and a load_inline kernel file whose CUDA body has a
# hole at HOLE (the line after the thread index).
PROBLEMS = {
    "scale": ("return x * 2", "out[i] = x[i] * 2.0f;", "x"),
    "relu": ("return torch.relu(x)", "out[i] = fmaxf(x[i], 0.0f);", "x"),
    "square": ("return x * x", "out[i] = x[i] * x[i];", "x"),
    "shift": ("return x + 1", "out[i] = x[i] + 1.0f;", "x"),
}

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(1 << 22)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# run {run}
cuda_source = """
#include <torch/extension.h>

__global__ void {name}_kernel(const float* x, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        
    }}
}}

torch::Tensor {name}_forward(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    int n = x.numel();
    {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

cpp_source = "torch::Tensor {name}_forward(torch::Tensor x);"

{name}_ext = load_inline(name="{name}_ext_{run}", cpp_sources=cpp_source, cuda_sources=cuda_source,
                         functions=["{name}_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return {name}_ext.{name}_forward(x)
'''
HOLE_MARK = "    if (i < n) {\n        "


def kernel_file(name: str, run: int) -> tuple[str, tuple[int, int]]:
    text = KERNEL.format(name=name, run=run)
    offset = text.index(HOLE_MARK) + len(HOLE_MARK)
    line = text.count("\n", 0, offset)
    return text, (line, offset - text.rfind("\n", 0, offset) - 1)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class BenchClient(LanguageClient):
    def __init__(self, settings: dict):
        super().__init__("dice-copilot-bench", "0.1")
        self.settings = settings
        self.notifications: list[tuple[str, dict]] = []


async def start_server(settings: dict, workspace: Path, env: dict | None = None) -> BenchClient:
    """The real server process over stdio, initialized with `settings` on `workspace`; every notification it sends
    is kept in `client.notifications`."""
    client = BenchClient(settings)

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def configuration(params):
        return [settings for _ in params.items]

    for method in ("diceCopilot/status", "diceCopilot/suggestionReady", "window/logMessage", "$/progress",
                   "window/workDoneProgress/create", "window/showMessage"):
        client.feature(method)(lambda params, method=method: client.notifications.append((method, params)))

    await client.start_io(sys.executable, "-m", "dice_copilot.server", env=env)
    try:
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(configuration=True),
            window=types.WindowClientCapabilities(work_done_progress=True))
        await client.initialize_async(types.InitializeParams(
            capabilities=capabilities, initialization_options={"settings": settings},
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="bench")]))
        client.initialized(types.InitializedParams())
    except BaseException:
        await stop_server(client)
        raise
    return client


async def wait_for_checkpoint(client: BenchClient, timeout_s: float) -> float:
    """Seconds until the server has loaded its checkpoint; raises when it reports an error or takes too long."""
    started = time.perf_counter()
    while True:
        status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="diceCopilot.showStatus", arguments=[]))
        status = status if isinstance(status, dict) else status._asdict()
        if status["loads"] >= 1:
            return time.perf_counter() - started
        if status["state"] == "error" or time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"the server did not load the checkpoint: {status['message']}")
        await asyncio.sleep(0.2)


def open_document(client: BenchClient, path: Path, text: str, version: int) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=path.as_uri(), language_id="python", version=version, text=text)))


def close_document(client: BenchClient, path: Path) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri())))


def invoked_request(path: Path, line: int, character: int) -> types.InlineCompletionParams:
    """An inline completion the user asked for (not one typing triggered): it waits the invoked budget."""
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()), position=types.Position(line, character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))


def last_status(client: BenchClient):
    """The newest diceCopilot/status notification's parameters (None before the first)."""
    statuses = [params for method, params in client.notifications if method == "diceCopilot/status"]
    return statuses[-1] if statuses else None


async def stop_server(client: BenchClient) -> None:
    try:
        await asyncio.wait_for(client.shutdown_async(None), timeout=10)
        client.exit(None)
    except Exception:  # a server that died or hangs is stopped below either way
        pass
    await client.stop()


async def run(args, scripted: bool) -> dict:
    settings = {"checkpoint": args.checkpoint, "device": args.device, "maxCandidates": args.candidates,
                "invokedBudgetMs": int(args.budget_s * 1000), "autoBudgetMs": 1500, "maxNewTokens": 256}
    workspace = Path(tempfile.mkdtemp(prefix="dice-bench-"))
    env = dict(os.environ)
    if scripted:
        # A kernel text of its own per round (as a new model candidate would be): every request compiles its
        # kernel; round 0 also builds the file's host code and bindings (the first request on a file).
        script = {"infill": [{"when": f'name="{name}_ext_{run}"', "middles": [f"{middle} // candidate {run}"]}
                             for name, (_, middle, _) in PROBLEMS.items() for run in range(args.rounds)]}
        (workspace / "script.json").write_text(json.dumps(script))
        env["DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS"] = str(workspace / "script.json")
    client = await start_server(settings, workspace, env)
    try:
        server = psutil.Process(client._server.pid)
        load_s = await wait_for_checkpoint(client, args.load_timeout_s)

        first_item_s, empty_s, cache_hit_ms, fast_path_ms, items_per_request = [], [], [], [], []
        compile_only_requests = 0  # answered with items that were compiled only (no CUDA device: not run)
        first_on_file_s, later_s = [], []  # round 0 / later rounds, requests that got an item
        reasons: dict[str, int] = {}
        for name, (body, _, _) in PROBLEMS.items():
            (workspace / f"{name}.py").write_text(REFERENCE.format(body=body))
        version = 0
        for run_index in range(args.rounds):
            for name in PROBLEMS:
                text, (line, character) = kernel_file(name, run_index)
                path = workspace / f"{name}_kernel.py"
                path.write_text(text)
                version += 1
                open_document(client, path, text, version)
                params = invoked_request(path, line, character)
                t0 = time.perf_counter()
                result = await client.text_document_inline_completion_async(params)
                elapsed = time.perf_counter() - t0
                items = list(result.items) if result else []
                items_per_request.append(len(items))
                if items and all(item.command.arguments[0]["verdict"]["compileOnly"] for item in items):
                    compile_only_requests += 1
                (first_item_s if items else empty_s).append(elapsed)
                if items:
                    (later_s if run_index else first_on_file_s).append(elapsed)
                reason = getattr(last_status(client), "reason", None) or "?"
                reasons[reason] = reasons.get(reason, 0) + 1
                print(f"  [{'scripted' if scripted else 'model'}] {name} round {run_index}: {len(items)} item(s) in "
                      f"{elapsed:.2f}s (reason {reason})", flush=True)
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    await client.text_document_inline_completion_async(params)
                    cache_hit_ms.append((time.perf_counter() - t0) * 1000)
                outside = types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=path.as_uri()), position=types.Position(0, 0),
                    context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    await client.text_document_inline_completion_async(outside)
                    fast_path_ms.append((time.perf_counter() - t0) * 1000)
                close_document(client, path)

        rss = server.memory_info().rss
        children_rss = sum(child.memory_info().rss for child in server.children(recursive=True)
                           if child.is_running())
    finally:
        await stop_server(client)
    return {
        "phase": "scripted" if scripted else "model", "checkpoint": args.checkpoint or "default",
        "device": args.device, "candidates": args.candidates,
        "load_s": load_s, "requests": len(items_per_request), "requests_with_items": len(first_item_s),
        "requests_with_compile_only_items": compile_only_requests,
        "first_validated_item_s": {"p50": percentile(first_item_s, 0.5), "p95": percentile(first_item_s, 0.95),
                                   "all": first_item_s},
        "first_request_on_a_file_s": {"p50": percentile(first_on_file_s, 0.5), "all": first_on_file_s},
        "new_kernel_on_a_seen_file_s": {"p50": percentile(later_s, 0.5), "p95": percentile(later_s, 0.95),
                                        "all": later_s},
        "empty_response_s": {"p50": percentile(empty_s, 0.5), "all": empty_s},
        "empty_reasons": reasons,
        "cache_hit_ms": {"p50": percentile(cache_hit_ms, 0.5), "p95": percentile(cache_hit_ms, 0.95)},
        "fast_path_ms": {"p50": percentile(fast_path_ms, 0.5), "p95": percentile(fast_path_ms, 0.95)},
        "server_rss_mib": rss / 2**20, "worker_processes_rss_mib": children_rss / 2**20,
    }


def table(results: dict) -> str:
    """One phase's metrics against the targets."""
    def fmt(value, unit):
        return "n/a" if value is None else f"{value:.3f} {unit}" if unit == "s" else f"{value:.1f} {unit}"

    def ratio(value, target):
        return "n/a" if value is None else f"{value / target:.2f}× of target"

    rows = [
        ("validated infill p50 (to first item)", fmt(results["first_validated_item_s"]["p50"], "s"), "1.5 s",
         ratio(results["first_validated_item_s"]["p50"], 1.5)),
        ("validated infill p95", fmt(results["first_validated_item_s"]["p95"], "s"), "—", ""),
        ("  new kernel, file seen before, p50", fmt(results["new_kernel_on_a_seen_file_s"]["p50"], "s"), "1.5 s",
         ratio(results["new_kernel_on_a_seen_file_s"]["p50"], 1.5)),
        ("  first request on a file, p50", fmt(results["first_request_on_a_file_s"]["p50"], "s"), "—", ""),
        ("cache hit p50", fmt(results["cache_hit_ms"]["p50"], "ms"), "20 ms",
         ratio(results["cache_hit_ms"]["p50"], 20)),
        ("cache hit p95", fmt(results["cache_hit_ms"]["p95"], "ms"), "20 ms",
         ratio(results["cache_hit_ms"]["p95"], 20)),
        ("fast-path empty p50", fmt(results["fast_path_ms"]["p50"], "ms"), "5 ms (server side)",
         ratio(results["fast_path_ms"]["p50"], 5)),
        ("server RSS", fmt(results["server_rss_mib"], "MiB"), "—", ""),
        ("worker processes RSS", fmt(results["worker_processes_rss_mib"], "MiB"), "—", ""),
    ]
    width = [max(len(row[i]) for row in rows + [("metric", "ours", "target", "ratio")]) for i in range(4)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(("metric", "ours", "target", "ratio"), width)),
             "-+-".join("-" * w for w in width)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, width)) for row in rows]
    lines.insert(0, f"== phase: {results['phase']} ==")
    compile_only = results["requests_with_compile_only_items"]
    got = (f"{results['requests_with_items']}/{results['requests']} requests got items "
           f"({results['requests_with_items'] - compile_only} validated on a GPU, {compile_only} compile-checked only: "
           f"no CUDA device, not run)") if compile_only else \
        f"{results['requests_with_items']}/{results['requests']} requests got validated items"
    lines.append(f"{got}; "
                 f"empty-answer reasons: {results['empty_reasons']}; checkpoint load {results['load_s']:.1f} s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the embedded default)")
    parser.add_argument("--device", default="auto", help="model device (default auto: cuda when present)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh (uncached) requests per problem")
    parser.add_argument("--repeats", type=int, default=20, help="cache-hit and fast-path requests per round")
    parser.add_argument("--candidates", type=int, default=4, help="diceCopilot.maxCandidates")
    parser.add_argument("--budget-s", type=float, default=120.0, help="invoked budget per request")
    parser.add_argument("--load-timeout-s", type=float, default=600.0)
    parser.add_argument("--phases", default="model,scripted", help="comma-separated: model, scripted")
    args = parser.parse_args()
    results = {}
    for phase in args.phases.split(","):
        try:
            results[phase] = asyncio.run(run(args, scripted=phase == "scripted"))
        except Exception as error:  # one phase failing must not lose the other's numbers
            results[phase] = {"phase": phase, "error": f"{type(error).__name__}: {error}"}
    for phase_results in results.values():
        print(table(phase_results) if "error" not in phase_results else
              f"== phase: {phase_results['phase']} == failed: {phase_results['error']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
