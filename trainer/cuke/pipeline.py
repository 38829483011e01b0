"""The CuKe build: source -> dedup -> decontamination -> shard -> strict validation (resumable) -> speedup filter ->
held-out split -> SFT / infilling / end-to-end / held-out JSONL, plus a stats report."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dice_copilot.validator.verdict import Outcome as VerdictOutcome, Stage

from .records import PairRecord, builtin_records, jsonl_records
from .report import write_report
from .splits import infill_split, order_easy_to_hard, plan_heldout, split_heldout
from .textsim import ContaminationIndex, DedupResult, deduplicate

# Verdict flags that make a correct, fast pair unfit for training data (the kernel may not be doing the work, or the
# problem cannot tell a real kernel from a trivial one).
MISLEADING_FLAGS = ("possible_stream_or_thread_injection", "changed_tf32_flags", "degenerate_problem",
                    "excessive_speedup")


@dataclass
class BuildConfig:
    """Every knob of `dice-copilot train cuke build`."""

    out: Path
    source: str = "builtin"  # "builtin" or a JSONL file of pairs
    min_speedup: float = 2.0  # keep pairs whose median speedup over eager PyTorch is at least this
    shard_index: int = 0
    shard_count: int = 1
    limit: int | None = None  # validate at most this many pairs of this shard (after dedup)
    compile_only: bool = False  # no GPU stage: compile-checked pairs go to a separate, unverified output
    decontaminate: Path | None = None  # benchmark checkout (e.g. KernelBench) to check n-gram overlap against
    decontam_threshold: float = 0.5  # exclude pairs sharing at least this share of their n-grams with it
    dedup_threshold: float = 0.9  # near-duplicate when problem and candidate shingle similarity both reach this
    generators: list[str] | None = None  # built-in generators to use (default: all)
    scale: float = 1.0  # built-in: multiply every generator's target count
    seed: int = 0  # built-in: generation seed
    heldout_families: list[str] | None = None  # None: chosen deterministically among the rare families
    drop_flags: tuple[str, ...] = MISLEADING_FLAGS
    timing_trials: int = 100
    # Stop starting new validations this long after the build started (generation and dedup included),
    # so that a run under a wall-clock limit ends with its results written; rerun to resume.
    max_seconds: float | None = None
    progress: bool = True
    # False: validate nothing, write the sets and the report from the verdicts already in OUT/results (e.g. restored
    # from an earlier GPU build); needs no GPU.
    validate: bool = True
    prep_workers: int = 0  # processes that generate and deduplicate the pairs (0: one per core)

    def prep_processes(self) -> int:
        return self.prep_workers or os.cpu_count() or 1


@dataclass
class Outcome:
    """What became of one pair."""

    record: PairRecord
    status: str  # kept | compiled_unverified | rejected | duplicate | contaminated | pending
    reason: str | None = None
    speedup: float | None = None
    verdict: dict | None = None
    extra: dict = field(default_factory=dict)


def load_records(config: BuildConfig) -> list[PairRecord]:
    if config.source == "builtin":
        return builtin_records(seed=config.seed, scale=config.scale, generators=config.generators,
                               workers=config.prep_processes())
    return jsonl_records(Path(config.source))


def in_shard(uid: str, index: int, count: int) -> bool:
    return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) % count == index


def classify(verdict: dict, min_speedup: float, drop_flags: tuple[str, ...], compile_only: bool) -> tuple[str, str | None]:
    """(status, reason) of a validated pair."""
    if not verdict.get("passed"):
        return "rejected", verdict.get("failure_code") or "failed"
    flags = [f for f in verdict.get("flags") or [] if f in drop_flags]
    if flags:
        return "rejected", f"misleading:{flags[0]}"
    if compile_only or verdict.get("compile_only"):
        return ("compiled_unverified", None) if verdict.get("stage") == Stage.COMPILE else ("rejected", "not_compiled")
    if verdict.get("stage") != Stage.TIMED or verdict.get("speedup") is None:
        return "rejected", "not_timed"
    if verdict["speedup"] < min_speedup:
        return "rejected", "below_speedup"
    return "kept", None


class ResultStore:
    """Per-item verdicts, one JSON line each, appended and flushed as they arrive: a rerun skips what is done.
    Every shard writes its own file; outputs are assembled from all files present."""

    def __init__(self, out: Path, shard_index: int, shard_count: int, mode: str):
        self.dir = out / "results"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{mode}-shard-{shard_index}-of-{shard_count}.jsonl"
        self.mode = mode

    def load_all(self) -> dict[str, dict]:
        done: dict[str, dict] = {}
        for path in sorted(self.dir.glob(f"{self.mode}-shard-*.jsonl")):
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by an interrupted run: that item is validated again
                    done[row["uid"]] = row
        return done

    def append(self, rows: list[dict]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
            handle.flush()


def cached_dedup(out: Path, records: list[PairRecord], threshold: float, workers: int = 1) -> DedupResult:
    """Dedup once per (pair set, threshold): reruns and other shards read the decision from OUT/dedup.json.
    Near duplicates are searched within each primary family (exact duplicates across everything)."""
    key = hashlib.sha256(("\n".join(r.uid for r in records) + f"|{threshold}").encode()).hexdigest()
    path = out / "dedup.json"
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return DedupResult(cached["kept"], [tuple(d) for d in cached["dropped"]])
    result = deduplicate([(r.pytorch_code, r.cuda_code) for r in records], threshold=threshold,
                         groups=[r.family for r in records], workers=workers)
    path.write_text(json.dumps({"key": key, "kept": result.kept, "dropped": result.dropped}), encoding="utf-8")
    return result


POOR_KEEP_RATE = 0.15  # a family kept this seldom (after POOR_AFTER verdicts) costs GPU time for few pairs
POOR_AFTER = 10
TURN_RATE_FLOOR = 0.3  # a turn gives a family at most 1 / 0.3 tries: its rate is a guess while its verdicts are few


def families_in_turn(pending: list[PairRecord], records: list[PairRecord], done: dict[str, dict],
                     config: BuildConfig) -> list[PairRecord]:
    """Pending pairs in the order that keeps a build cut short by its deadline balanced across families: they take
    turns, each turn giving every family about one more kept pair. A family's k-th pending pair is ranked by the
    family's kept pairs so far plus k times its keep rate, Laplace-smoothed ((kept + 1) / (validated + 2)) and at
    least TURN_RATE_FLOOR (the rates do not change during a run), so a family with many kept pairs waits and an
    untried one counts as an even chance; families kept less often than POOR_KEEP_RATE after POOR_AFTER verdicts
    go after all others. The filter is unchanged; within a family the hash order is kept."""
    counts: dict[str, list[int]] = {}
    for r in records:
        row = done.get(r.uid)
        if row is not None:
            status, _ = classify(row["verdict"], config.min_speedup, config.drop_flags, config.compile_only)
            family = counts.setdefault(r.family, [0, 0])
            family[0] += 1
            family[1] += status == "kept"
    turns: dict[str, int] = {}

    def rank(r: PairRecord) -> tuple[bool, float]:
        validated, kept = counts.get(r.family, (0, 0))
        rate = (kept + 1) / (validated + 2)
        turns[r.family] = turns.get(r.family, 0) + 1
        return validated >= POOR_AFTER and rate < POOR_KEEP_RATE, kept + turns[r.family] * max(rate, TURN_RATE_FLOOR)

    ranks = {r.uid: rank(r) for r in pending}  # in the pending order: a family's k-th pair gets turn k
    return sorted(pending, key=lambda r: ranks[r.uid])


def _progress(total: int, enabled: bool, desc: str):
    from tqdm import tqdm
    # Into a log file (not a terminal) a line every 30 s, so a log cut short still says how far the run got.
    return tqdm(total=total, desc=desc, unit="pair", disable=not enabled, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30)


def _compact(verdict: dict, log_chars: int = 2000) -> dict:
    """Keep the stored verdict small: the tail of the compiler log is what says why a build failed; a build that
    succeeded keeps none (its commands are in the build details)."""
    log = verdict.get("compiler_log") or ""
    if verdict.get("stage") not in (None, Stage.STATIC, Stage.COMPILE) or verdict.get("passed"):
        verdict["compiler_log"] = ""
    elif len(log) > log_chars:
        verdict["compiler_log"] = "[...]" + log[-log_chars:]
    return verdict


@dataclass
class ValidationRun:
    validated: int = 0
    seconds: float = 0.0
    gpus: int = 0
    stage_seconds_per_pair: dict[str, float] = field(default_factory=dict)  # where a build's time goes
    worker_replacements: int = 0  # worker processes restarted after a crash, hang or sticky CUDA error
    setup_seconds: float = 0.0  # precompiling the common torch headers: once per machine, not per pair
    # Verdicts this machine could not reach (a missing toolkit piece, a validator fault): not stored, so a rerun on
    # a fixed machine validates those pairs; reason -> pairs.
    not_checked: dict[str, int] = field(default_factory=dict)


DRAIN_SECONDS = 45


def validate_pending(pending: list[PairRecord], store: ResultStore, config: BuildConfig,
                     deadline: float | None = None) -> ValidationRun:
    """Validate pairs as a stream (compiles on every core while the GPUs check pairs compiled earlier) and store
    each verdict as it arrives; no new pair starts after `deadline`."""
    stage_seconds: dict[str, float] = {}
    if not pending:
        return ValidationRun()
    from dice_copilot.validator import Budget, ValidatorPool

    budget = Budget(timing=not config.compile_only, timing_trials=config.timing_trials)
    pool = ValidatorPool(gpus=[] if config.compile_only else None)
    gpus = 0 if config.compile_only else len(pool.gpus)
    # A build validates many pairs: wait for the precompiled headers (a one-time cost per machine) rather than
    # compile the first pairs without them at several times the cost.
    setup_start = time.perf_counter()
    if gpus and pool.compile_config.use_pch:
        pool.builder.prepare_common_headers()
    start = time.perf_counter()
    done = 0
    not_checked: dict[str, int] = {}

    def until_deadline():
        for r in pending:
            if deadline is not None and time.perf_counter() > deadline:
                return  # out of time: what is stored so far is kept, a rerun continues from here
            yield r.pytorch_code, r.cuda_code

    try:
        with _progress(len(pending), config.progress, "validating") as bar:
            # Past the deadline, in-flight pairs get DRAIN_SECONDS to finish (a hung one must not hold up the
            # run's report and the export of what was stored).
            give_up = None if deadline is None else deadline + DRAIN_SECONDS
            for index, verdict in pool.validate_iter(until_deadline(), policy="strict", budget=budget,
                                                     give_up_at=give_up):
                bar.update(1)
                if verdict.outcome is VerdictOutcome.NOT_CHECKED:
                    reason = verdict.failure or str(verdict.failure_code)
                    not_checked[reason] = not_checked.get(reason, 0) + 1
                    continue
                row = {"uid": pending[index].uid, "verdict": _compact(json.loads(verdict.to_json())),
                       "mode": store.mode}
                for stage, spent in verdict.stage_times.items():
                    stage_seconds[stage] = stage_seconds.get(stage, 0.0) + spent
                store.append([row])
                done += 1
    finally:
        pool.shutdown()
    per_pair = {stage: round(total / done, 3) for stage, total in sorted(stage_seconds.items())} if done else {}
    return ValidationRun(done, time.perf_counter() - start, gpus, per_pair, pool.worker_replacements,
                         round(start - setup_start, 1), not_checked)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


def _base_row(outcome: Outcome) -> dict:
    r = outcome.record
    return {"id": r.uid, "level": r.level, "families": list(r.families), "composition": r.composition,
            "dtype": r.dtype, "source": r.source,
            "speedup": None if outcome.speedup is None else float(outcome.speedup)}


def emit_datasets(out: Path, kept: list[Outcome], plan_families: list[str] | None,
                  library: list[PairRecord]) -> tuple[dict, list[PairRecord]]:
    """Write the four task sets from the kept pairs; returns counts with the held-out plan, and the training
    pairs. The plan is made from the whole deduplicated `library`, validated or not, so that it stays the same
    while verdicts arrive: a pair trained on in one build is never held out in a later one."""
    from dice_copilot.model.prompts import answer_block, end_to_end_prompt

    by_uid = {o.record.uid: o for o in kept}
    records = [o.record for o in kept]
    plan = plan_heldout(library, families=plan_families)
    train, heldout = split_heldout(records, plan)
    sft, infill, e2e, evaluation = [], [], [], []
    for r in train:
        sft.append({**_base_row(by_uid[r.uid]), "prompt": end_to_end_prompt(r.pytorch_code),
                    "response": answer_block(r.cuda_code)})
    # Both RL task sets easy -> hard: the RL trainer takes them in file order (docs/decoding.md#bic-rl).
    for idx, r in enumerate(order_easy_to_hard(train)):
        base = _base_row(by_uid[r.uid])
        parts = infill_split(r.cuda_code)
        if parts is not None:
            infill.append({**base, "pytorch_code": r.pytorch_code, "cuda_code": r.cuda_code, "prefix": parts.prefix,
                           "middle": parts.middle, "suffix": parts.suffix})
        e2e.append({**base, "idx": idx, "pytorch_code": r.pytorch_code, "cuda_code": r.cuda_code})
    for r in order_easy_to_hard(heldout):
        parts = infill_split(r.cuda_code)
        evaluation.append({**_base_row(by_uid[r.uid]), "pytorch_code": r.pytorch_code, "cuda_code": r.cuda_code,
                           "prefix": parts.prefix if parts else "", "middle": parts.middle if parts else "",
                           "suffix": parts.suffix if parts else ""})
    for name, rows in (("sft.jsonl", sft), ("infill_tasks.jsonl", infill), ("e2e_tasks.jsonl", e2e),
                       ("eval_heldout.jsonl", evaluation)):
        _write_jsonl(out / name, rows)
    return ({"sft": len(sft), "infill_tasks": len(infill), "e2e_tasks": len(e2e), "eval_heldout": len(evaluation),
             "heldout_families": plan.families, "heldout_styles": plan.styles, "heldout_compositions": plan.compositions}, train)


COMPILE_ONLY_NOTE = """UNVERIFIED: these pairs were only compiled (no CUDA device was used), so neither numerical
correctness nor speed was checked and the speedup filter was NOT applied. Do not train on them as CuKe data;
rebuild on a GPU machine without --compile-only to get the validated, speedup-filtered sets.
"""


def _prepare_headers_meanwhile(config: BuildConfig) -> None:
    """On a GPU build, precompile the common torch headers while the pairs are generated and deduplicated (about a
    minute of single-threaded Python): a fresh machine's one-time header set-up then costs the build little;
    validate_pending finds them built or waits for them."""
    if config.compile_only:
        return
    import torch

    if not torch.cuda.is_available():
        return
    from dice_copilot.validator.compile import CompileConfig, ExtensionBuilder

    compile_config = CompileConfig()  # what validate_pending's pool uses
    if compile_config.use_pch:
        threading.Thread(target=ExtensionBuilder(compile_config).prepare_common_headers, daemon=True).start()


def run_build(config: BuildConfig) -> dict:
    """Run the whole build; returns the stats dictionary (also written to stats.json / stats.md)."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    if config.validate:
        _prepare_headers_meanwhile(config)
    records = load_records(config)
    outcomes = {r.uid: Outcome(r, "pending") for r in records}

    dedup = cached_dedup(out, records, config.dedup_threshold, config.prep_processes())
    for index, kind, other, similarity in dedup.dropped:
        o = outcomes[records[index].uid]
        o.status, o.reason = "duplicate", f"{kind}_duplicate"
        o.extra = {"duplicate_of": records[other].uid, "similarity": round(similarity, 3)}
    unique = [records[i] for i in dedup.kept]

    contamination: list[dict] = []
    if config.decontaminate is not None:
        index = ContaminationIndex(Path(config.decontaminate))
        clean = []
        for r in unique:
            problem, candidate = index.overlap(r.pytorch_code), index.overlap(r.cuda_code)
            worst = max(problem, candidate, key=lambda o: o.fraction)
            excluded = worst.fraction >= config.decontam_threshold
            contamination.append({"id": r.uid, "problem_overlap": round(problem.fraction, 4),
                                  "candidate_overlap": round(candidate.fraction, 4), "closest_file": worst.source,
                                  "excluded": excluded})
            if excluded:
                outcomes[r.uid].status, outcomes[r.uid].reason = "contaminated", "benchmark_overlap"
            else:
                clean.append(r)
        _write_jsonl(out / "decontamination.jsonl", contamination)
        unique = clean

    shard = [r for r in unique if in_shard(r.uid, config.shard_index, config.shard_count)]
    # a deterministic shuffle: --limit (or a run cut short by --max-seconds) samples every family, not the first few
    shard.sort(key=lambda r: hashlib.sha256(b"order:" + r.uid.encode()).digest())
    if config.limit is not None:
        shard = shard[:config.limit]
    mode = "compile_only" if config.compile_only else "gpu"
    store = ResultStore(out, config.shard_index, config.shard_count, mode)
    done = store.load_all()
    pending = [r for r in shard if r.uid not in done]
    if not config.compile_only:
        pending = families_in_turn(pending, shard, done, config)
    if config.progress:
        print(f"{len(records)} pairs, {len(unique)} after dedup, {len(done)} validated before, {len(pending)} to "
              f"validate ({time.perf_counter() - t_start:.0f} s so far)", file=sys.stderr, flush=True)
    deadline = t_start + config.max_seconds if config.max_seconds is not None else None
    validation = validate_pending(pending, store, config, deadline) if config.validate else ValidationRun()
    validated, seconds, gpus = validation.validated, validation.seconds, validation.gpus
    done = store.load_all()

    for r in unique:
        row = done.get(r.uid)
        if row is None:
            continue
        o = outcomes[r.uid]
        o.verdict = row["verdict"]
        o.speedup = row["verdict"].get("speedup")
        o.status, o.reason = classify(row["verdict"], config.min_speedup, config.drop_flags, config.compile_only)

    datasets: dict = {}
    train: list[PairRecord] = []
    if config.compile_only:
        compiled = [o for o in outcomes.values() if o.status == "compiled_unverified"]
        folder = out / "compile_only_unverified"
        folder.mkdir(exist_ok=True)
        (folder / "README.txt").write_text(COMPILE_ONLY_NOTE, encoding="utf-8")
        _write_jsonl(folder / "pairs.jsonl", [{**_base_row(o), "pytorch_code": o.record.pytorch_code,
                                               "cuda_code": o.record.cuda_code, "verified": False} for o in compiled])
        datasets = {"compile_only_unverified": len(compiled)}
    else:
        kept = [o for o in outcomes.values() if o.status == "kept"]
        datasets, train = emit_datasets(out, kept, config.heldout_families, unique)

    run = {"validated_this_run": validated, "remaining_in_shard": len(pending) - validated, "validation_seconds": round(seconds, 1), "gpus": gpus,
           "total_seconds": round(time.perf_counter() - t_start, 1),
           "pairs_per_minute": round(60 * validated / seconds, 1) if seconds else None,
           "pairs_per_gpu_minute": round(60 * validated / (seconds * gpus), 1) if seconds and gpus else None,
           "stage_seconds_per_pair": validation.stage_seconds_per_pair,
           "worker_replacements": validation.worker_replacements, "setup_seconds": validation.setup_seconds,
           "not_checked": validation.not_checked}
    return write_report(out, config, list(outcomes.values()), datasets, train, run, len(contamination))
