"""Validator speed: time-to-verdict (cold and warm build cache, and a kernel-body infill) of this validator versus
the KernelBench-style path (load_inline per candidate, in process), and verdicts per minute for a batch of
candidates with timing off. Problems and honest candidates: bench/validator_problems/ (written for this project);
each candidate's CUDA source includes torch/extension.h, as the DICE prompt's example and models' answers do.

    python bench/validator_bench.py --out results.json                 # everything (about 10 min on an H200 box)
    python bench/validator_bench.py --parts ours,batch --out a.json    # split into shorter runs
    python bench/validator_bench.py --parts kernelbench --kb-problems 3 --merge a.json --out b.json
    python bench/validator_bench.py --parts large --out large.json     # inputs of real benchmark sizes (GiBs)

The `large` part (not run by default) validates candidates whose inputs have the sizes of real benchmark problems
and prints each verdict's time split by stage and by the worker's phases, cold (fresh worker) and warm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from dice_copilot.validator import Budget, Candidate, Problem, ValidatorPool
from dice_copilot.validator import worker as worker_module
from dice_copilot.validator.compile import CompileConfig, resolve_arch, usable_cpus

PROBLEMS = Path(__file__).resolve().parent / "validator_problems"
NO_TIMING = Budget(timing=False, call_timeout_s=30)


def load_problems(names: list[str] | None) -> list[tuple[str, Path, Path]]:
    folders = sorted(p for p in PROBLEMS.iterdir() if (p / "candidate.py").exists())
    if names:
        folders = [f for f in folders if f.name in names]
    return [(f.name, f / "reference.py", f / "candidate.py") for f in folders]


def infill_variant(source: str, tag: int) -> str:
    """Same host code, a different (equivalent) kernel body: what a kernel-body infill produces."""
    return source.replace("threadIdx.x", f"(threadIdx.x + {tag} - {tag})", 1)


def whole_variant(source: str, tag: int) -> str:
    """A different kernel and different host glue: what a whole-candidate sample produces."""
    source = infill_variant(source, tag)
    return re.sub(r"(torch::Tensor \w+\([^)]*\) \{\n)", rf"\1    // sample {tag}\n", source, count=1)


# ---------------------------------------------------------------- KernelBench-style baseline (in process)

KB_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import torch
    t0 = time.perf_counter()
    os.environ["TORCH_EXTENSIONS_DIR"] = sys.argv[3]
    ref_src, cand_src = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    ctx_ref, ctx = {}, {}
    exec(compile(ref_src, "reference", "exec"), ctx_ref)
    status = "ok"
    try:
        exec(compile(cand_src, "candidate", "exec"), ctx)   # load_inline compiles here, in this process
        t_compiled = time.perf_counter()
        torch.manual_seed(42)
        init = ctx_ref["get_init_inputs"]()
        torch.manual_seed(42)
        ref = ctx_ref["Model"](*init).cuda()
        torch.manual_seed(42)
        new = ctx["ModelNew"](*init).cuda()
        torch.manual_seed(42)
        seeds = [int(torch.randint(0, 2**32 - 1, (1,))) for _ in range(5)]
        with torch.no_grad():
            for s in seeds:
                torch.manual_seed(s)
                inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ctx_ref["get_inputs"]()]
                out_ref = ref(*inputs); torch.cuda.synchronize()
                out_new = new(*inputs); torch.cuda.synchronize()
                if out_ref.shape != out_new.shape or not torch.allclose(out_ref, out_new, atol=1e-4, rtol=1e-4):
                    status = "incorrect"
                    break
    except Exception as exc:
        status = f"error: {type(exc).__name__}: {exc}"[:300]
        t_compiled = time.perf_counter()
    print("KB_RESULT", json.dumps({"status": status, "compile_s": t_compiled - t0,
                                   "verdict_s": time.perf_counter() - t0}))
''')


def kernelbench_verdict(reference: Path, candidate_source: str, ext_dir: Path, timeout: float = 590) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(candidate_source)
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=_arch_list())
    out = subprocess.run([sys.executable, "-c", KB_SCRIPT, str(reference), handle.name, str(ext_dir)],
                         capture_output=True, text=True, env=env, timeout=timeout)
    os.unlink(handle.name)
    match = re.search(r"KB_RESULT (.*)", out.stdout)
    if not match:
        return {"status": "error: " + (out.stderr or out.stdout)[-300:], "verdict_s": None}
    return json.loads(match.group(1))


def _arch_list() -> str:
    arch = resolve_arch(None).removeprefix("sm_")
    return f"{arch[:-1]}.{arch[-1]}"


# ---------------------------------------------------------------- parts

def timed_validate(pool, problem, candidate, budget=NO_TIMING):
    start = time.perf_counter()
    verdict = pool.validate(problem, candidate, "ide", budget)
    return verdict, time.perf_counter() - start


def breakdown(verdict, total_s: float) -> dict:
    """Where one verdict's time went: building (compile stage), checking in the worker (GPU stage), and whether
    the GPU stage had to wait for a worker process to start."""
    builds = verdict.details.get("builds", [])
    return {"total_s": round(total_s, 3), "compile_s": verdict.stage_times.get("compile"),
            "check_s": verdict.stage_times.get("gpu"), "fresh_worker": verdict.details.get("fresh_worker"),
            "strategy": ",".join(b["strategy"] or "?" for b in builds),
            "compiled_units": [u for b in builds for u in b["compiled_units"]],
            "unit_seconds": [b.get("unit_seconds", {}) for b in builds],
            "cached_build": verdict.cached_build}


def _short(b: dict) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    return f"{fmt(b['compile_s'])}+{fmt(b['check_s'])}{'*' if b['fresh_worker'] else ''}"


def run_ours(pool, problems, results):
    rows = []
    for name, ref, cand in problems:
        problem = Problem.from_file(ref)
        source = cand.read_text()
        cold, t_cold = timed_validate(pool, problem, Candidate.from_source(source, path=str(cand)))
        warm, t_warm = timed_validate(pool, problem, Candidate.from_source(source, path=str(cand)))
        infill, t_infill = timed_validate(pool, problem, Candidate.from_source(infill_variant(source, 7),
                                                                                path=str(cand)))
        timed, t_timed = timed_validate(pool, problem, Candidate.from_source(source, path=str(cand)), Budget())
        parts = {"cold": breakdown(cold, t_cold), "warm": breakdown(warm, t_warm),
                 "infill": breakdown(infill, t_infill), "timed": breakdown(timed, t_timed)}
        row = {"problem": name, "cold_s": t_cold, "warm_s": t_warm, "infill_s": t_infill, "timed_verdict_s": t_timed,
               "passed": [cold.passed, warm.passed, infill.passed, timed.passed],
               "failure": cold.failure or infill.failure or timed.failure, "speedup": timed.speedup,
               "compile_s": cold.stage_times.get("compile"), "strategy_log": cold.compiler_log[:120],
               "breakdown": parts}
        rows.append(row)
        print(f"ours  {name:12s} cold {t_cold:6.2f}s  warm {t_warm:5.2f}s  infill {t_infill:5.2f}s  "
              f"timed {t_timed:5.2f}s  speedup {timed.speedup or 0:5.2f}x  passed {row['passed']}  "
              f"[compile+check s, *=worker started: cold {_short(parts['cold'])} warm {_short(parts['warm'])} "
              f"infill {_short(parts['infill'])} timed {_short(parts['timed'])}; {parts['cold']['strategy']}, "
              f"cold compiled {parts['cold']['compiled_units']} (no main.cpp: its glue was built before), "
              f"infill compiled {parts['infill']['compiled_units']}]", flush=True)
    results["ours"] = rows
    results["ours_worker_swaps"] = pool.worker_swaps
    results["ours_worker_replacements"] = pool.worker_replacements


def run_kernelbench(problems, results, limit: int):
    rows = []
    for name, ref, cand in problems[:limit]:
        ext_dir = Path(tempfile.mkdtemp(prefix="kb_ext_"))
        source = cand.read_text()
        cold = kernelbench_verdict(ref, source, ext_dir)
        warm = kernelbench_verdict(ref, source, ext_dir)
        infill = kernelbench_verdict(ref, infill_variant(source, 7), ext_dir)
        rows.append({"problem": name, "cold_s": cold["verdict_s"], "warm_s": warm["verdict_s"],
                     "infill_s": infill["verdict_s"], "status": [cold["status"], warm["status"], infill["status"]]})
        print(f"kb    {name:12s} cold {cold['verdict_s'] or -1:6.2f}s  warm {warm['verdict_s'] or -1:5.2f}s  "
              f"infill {infill['verdict_s'] or -1:6.2f}s  {rows[-1]['status']}", flush=True)
    results["kernelbench"] = rows


def run_batch(pool, problems, results, size: int):
    out = {}
    for kind, make in (("whole", whole_variant), ("infill", infill_variant)):
        items = []
        for i in range(size):
            name, ref, cand = problems[i % len(problems)]
            items.append((Problem.from_file(ref), Candidate.from_source(make(cand.read_text(), 1000 + i),
                                                                       path=str(cand))))
        start = time.perf_counter()
        verdicts = pool.validate_many(items, "ide", NO_TIMING)
        wall = time.perf_counter() - start
        passed = sum(v.passed for v in verdicts)
        parts = [breakdown(v, 0.0) for v in verdicts]
        compile_total = sum(p["compile_s"] or 0 for p in parts)
        check_total = sum(p["check_s"] or 0 for p in parts)
        fresh = sum(bool(p["fresh_worker"]) for p in parts)
        out[kind] = {"n": size, "wall_s": wall, "verdicts_per_min": size / wall * 60, "passed": passed,
                     "failures": sorted({v.failure for v in verdicts if not v.passed})[:5],
                     "compile_s_sum": compile_total, "check_s_sum": check_total, "fresh_workers": fresh,
                     "worker_swaps": pool.worker_swaps, "worker_replacements": pool.worker_replacements,
                     "strategies": sorted({p["strategy"] for p in parts}),
                     "verdicts": [{k: p[k] for k in ("compile_s", "check_s", "fresh_worker", "strategy")}
                                  for p in parts]}
        print(f"batch {kind:6s} {size} candidates in {wall:6.1f}s = {size / wall * 60:6.1f} verdicts/min, "
              f"{passed} passed  [compile {compile_total:.1f}s + check {check_total:.1f}s summed over verdicts, "
              f"{fresh} waited for a worker start, worker swaps so far {pool.worker_swaps}]",
              flush=True)
    results["batch"] = out


# Inputs of the sizes real benchmark problems have, with this folder's candidates for those operators: a
# 16384 x 16384 fp32 elementwise op (1 GiB in, 1 GiB out) and an 8192^3 fp32 GEMM (256 MiB a matrix; rand inputs, as
# the fp32 tolerance needs for a K of 8192: sums of signed products that long round differently in any two orders).
LARGE_CASES = {
    "relu_16384x16384": ("relu", "[torch.randn(16384, 16384)]"),
    "matmul_8192": ("matmul", "[torch.rand(8192, 8192), torch.rand(8192, 8192)]"),
}


def large_reference(folder: str, inputs: str) -> str:
    """The folder's reference with get_inputs() returning `inputs`."""
    text = (PROBLEMS / folder / "reference.py").read_text()
    replaced, count = re.subn(r"def get_inputs\(\):\n    return .*\n", f"def get_inputs():\n    return {inputs}\n", text)
    assert count == 1, f"{folder}/reference.py: no one-line get_inputs() to resize"
    return replaced


@contextlib.contextmanager
def phase_clock(log: list):
    """Records (time, phase) of every phase a worker announces while in effect (the pool itself passes no
    listener): the harness announces each phase as it starts, so a phase lasts until the next one or the result."""
    original = worker_module.WorkerProcess.run_job

    def run_job(self, job, total_timeout_s, on_event=None):
        def record(message):
            log.append((time.monotonic(), message["phase"]))
            if on_event:
                on_event(message)
        log.append((time.monotonic(), "worker start + job sent"))
        try:
            return original(self, job, total_timeout_s, on_event=record)
        finally:
            log.append((time.monotonic(), None))

    worker_module.WorkerProcess.run_job = run_job
    try:
        yield
    finally:
        worker_module.WorkerProcess.run_job = original


def phase_seconds(log: list) -> dict:
    """Seconds per phase, the correctness trials summed into one entry."""
    totals: dict = {}
    for (start, phase), (end, _) in zip(log, log[1:]):
        if phase is None:
            continue
        name = "correctness trials" if phase.startswith("correctness trial") else phase
        totals[name] = totals.get(name, 0.0) + end - start
    return {name: round(seconds, 3) for name, seconds in totals.items()}


def run_large(config, results):
    """Each large case cold (a pool whose worker starts for it; the build is compiled unless the cache has it) and
    warm (same pool again), with timing on, as a benchmark verdict runs."""
    rows = []
    for case, (folder, inputs) in LARGE_CASES.items():
        problem = Problem.from_source(large_reference(folder, inputs), path=f"{case}.py")
        candidate = PROBLEMS / folder / "candidate.py"
        with ValidatorPool(compile_config=config, warm=False) as pool:
            for kind in ("cold", "warm"):
                log: list = []
                with phase_clock(log):
                    verdict, total = timed_validate(pool, problem, Candidate.from_file(candidate), Budget())
                times = verdict.stage_times
                worker = {k: times.get(k, 0.0) for k in ("import", "correct", "attribution", "timed")}
                row = {"case": case, "kind": kind, "passed": verdict.passed, "failure": verdict.failure,
                       "total_s": round(total, 3), "static_s": times.get("static"), "compile_s": times.get("compile"),
                       "gpu_s": times.get("gpu"), "worker_stage_s": worker,
                       # what the GPU stage spent outside the harness's own stages: the worker process's start
                       # (torch import, CUDA context, a warm-up verdict) when fresh, and the messages
                       "worker_start_and_messages_s": (times.get("gpu") or 0.0) - worker["import"] - worker["correct"]
                       - worker["timed"], "fresh_worker": verdict.details.get("fresh_worker"),
                       "cached_build": verdict.cached_build, "phases_s": phase_seconds(log),
                       "timing": {k: vars(v) for k, v in verdict.timing.items()}, "speedup": verdict.speedup}
                rows.append(row)
                fmt = lambda v: "-" if v is None else f"{v:.2f}"
                phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in
                                   sorted(row["phases_s"].items(), key=lambda item: -item[1])[:6])
                print(f"large {case:17s} {kind:4s} {total:6.2f}s passed {verdict.passed}  [static "
                      f"{fmt(row['static_s'])} + compile {fmt(row['compile_s'])} + worker start/messages "
                      f"{row['worker_start_and_messages_s']:.2f} + import {worker['import']:.2f} + correctness "
                      f"{worker['correct']:.2f} (attribution {worker['attribution']:.2f}) + timing "
                      f"{worker['timed']:.2f}; longest phases: {phases}]"
                      + (f" {verdict.failure}" if verdict.failure else ""), flush=True)
    results["large"] = rows


def print_table(results):
    ours = {r["problem"]: r for r in results.get("ours", [])}
    kb = {r["problem"]: r for r in results.get("kernelbench", [])}
    print("\n| problem | ours cold (s) | KB cold (s) | ratio | ours warm (s) | KB warm (s) | ours infill (s) | "
          "KB infill (s) | ratio | speedup vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    ratio = lambda a, b: "-" if not a or not b else f"{b / a:.1f}x"
    for name, r in ours.items():
        k = kb.get(name, {})
        print(f"| {name} | {fmt(r['cold_s'])} | {fmt(k.get('cold_s'))} | {ratio(r['cold_s'], k.get('cold_s'))} | "
              f"{fmt(r['warm_s'])} | {fmt(k.get('warm_s'))} | {fmt(r['infill_s'])} | {fmt(k.get('infill_s'))} | "
              f"{ratio(r['infill_s'], k.get('infill_s'))} | {fmt(r['speedup'])} |")
    if ours:
        med = statistics.median
        summary = {"ours_cold_median_s": med([r["cold_s"] for r in ours.values()]),
                   "ours_infill_median_s": med([r["infill_s"] for r in ours.values()]),
                   "ours_warm_median_s": med([r["warm_s"] for r in ours.values()])}
        if kb:
            shared = [n for n in kb if n in ours and kb[n]["cold_s"]]
            if shared:
                summary["cold_ratio_median"] = med([kb[n]["cold_s"] / ours[n]["cold_s"] for n in shared])
                # The baseline runs on a few problems (it is slow), ours on all: their typical verdicts compared.
                summary["cold_ratio_of_medians"] = med([kb[n]["cold_s"] for n in shared]) / summary[
                    "ours_cold_median_s"]
                summary["infill_ratio_median"] = med([kb[n]["infill_s"] / ours[n]["infill_s"] for n in shared
                                                      if kb[n]["infill_s"]])
        results["summary"] = summary
        print("\n" + json.dumps(summary, indent=1))
    for kind, b in results.get("batch", {}).items():
        print(f"batch ({kind} candidates, timing off): {b['verdicts_per_min']:.0f} verdicts/min "
              f"({b['passed']}/{b['n']} passed)")
    if results.get("large"):
        print("\n| large case | verdict | total (s) | static | compile | worker start + messages | import | "
              "correctness (attribution) | timing | passed |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        for r in results["large"]:
            w = r["worker_stage_s"]
            print(f"| {r['case']} | {r['kind']} | {r['total_s']:.2f} | {fmt(r['static_s'])} | {fmt(r['compile_s'])} | "
                  f"{r['worker_start_and_messages_s']:.2f} | {w['import']:.2f} | {w['correct']:.2f} "
                  f"({w['attribution']:.2f}) | {w['timed']:.2f} | {r['passed']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="ours,kernelbench,batch")
    parser.add_argument("--problems", nargs="*", help="subset of problem folder names")
    parser.add_argument("--kb-problems", type=int, default=3, help="problems run through the slow baseline")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers-per-gpu", type=int, default=2, help="worker processes per GPU in the batch part")
    parser.add_argument("--merge", type=Path, help="results JSON of an earlier run (other --parts) to combine with")
    parser.add_argument("--cache", type=Path, help="build cache (default: a fresh temporary folder = cold)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    problems = load_problems(args.problems)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="dice_bench_cache_"))
    results: dict = json.loads(args.merge.read_text()) if args.merge else {}
    results.update({"problems": [p[0] for p in problems], "cache": str(cache), "cpus": usable_cpus()})

    def save():
        args.out.write_text(json.dumps(results, indent=1, default=str))

    if parts & {"ours", "batch"}:
        config = CompileConfig(cache_dir=cache)
        with ValidatorPool(compile_config=config) as pool:
            start = time.perf_counter()
            ok = pool.builder.prepare_common_headers()
            results["setup"] = {"pch_s": time.perf_counter() - start, "pch_ok": ok,
                                "gpus": pool.gpus, "arch": pool.builder.arch}
            print(f"one-time setup: precompiled headers {results['setup']['pch_s']:.1f}s {ok}", flush=True)
            save()
            if "ours" in parts:
                run_ours(pool, problems, results)
                save()
        if "batch" in parts:
            # Correctness-only batches overlap several workers per GPU (no timing in this part).
            with ValidatorPool(compile_config=config, workers_per_gpu=args.workers_per_gpu) as batch_pool:
                run_batch(batch_pool, problems, results, args.batch)
            save()
    if "kernelbench" in parts:
        run_kernelbench(problems, results, args.kb_problems)
        save()
    if "large" in parts:
        run_large(CompileConfig(cache_dir=cache), results)
        save()
    print_table(results)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
