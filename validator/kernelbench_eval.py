"""KernelBench-format evaluation: generate `ModelNew` candidates for one level of a user's KernelBench checkout,
validate them in strict mode, and score them as KernelBench does (docs/validator.md#kernelbench-scoring).

Nothing of KernelBench ships with this project: the problems are read from the checkout the user points at.
Generation and validation are pluggable callables, so the loop, the resume logic and the scoring are testable
without a model or a GPU.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from dice_copilot.model.decoding import DEFAULT_STRATEGY, DEFAULT_THRESHOLD

from .verdict import FailureCode, Stage, ValidatorError, Verdict

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


class KernelBenchLayoutError(ValidatorError, ValueError):
    """The directory is not a KernelBench checkout (or lacks the level): the message says what was expected."""


@dataclass(frozen=True)
class KernelBenchProblem:
    """One reference file `KernelBench/level{level}/{problem_id}_{name}.py`."""

    level: int
    problem_id: int
    name: str
    path: Path

    @property
    def key(self) -> str:
        return f"{self.problem_id}_{self.name}"


@dataclass
class GeneratedCandidate:
    """One model answer: the raw text, the extracted module (None when the answer holds no code block)."""

    text: str
    code: str | None
    tokens: int | None = None
    seconds: float | None = None
    finish_reason: str | None = None


# (reference source, number of samples) -> that many candidates.
CandidateGenerator = Callable[[str, int], list[GeneratedCandidate]]
# (reference problem file, candidate module source) -> its Verdict.
ValidateFunction = Callable[[Path, str], Verdict]


@dataclass
class SampleResult:
    """The outcome of one generated sample, as stored in `results/{id}_{name}/sample{k}.json`."""

    problem_id: int
    name: str
    sample: int
    compiled: bool
    correct: bool
    speedup: float | None = None
    stage: Stage | None = None  # the verdict's stage (the one that ran last)
    failure_code: FailureCode | None = None
    failure: str | None = None
    flags: list[str] = field(default_factory=list)
    compile_only: bool = False
    generated_tokens: int | None = None
    generation_seconds: float | None = None
    validation_seconds: float | None = None

    def __post_init__(self):
        self.stage = None if self.stage is None else Stage(self.stage)
        self.failure_code = None if self.failure_code is None else FailureCode(self.failure_code)

    @classmethod
    def from_dict(cls, data: dict) -> "SampleResult":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class LevelScore:
    """KernelBench metrics for one level; rates use `num_problems` as the denominator (unevaluated = failed)."""

    level: int
    num_problems: int
    num_evaluated: int
    compile_rate: float
    correct_rate: float
    fast_p: dict[str, float]
    geomean_speedup: float | None
    samples_per_problem: int = 1
    correct_at_k: float | None = None
    compile_only: bool = False


# ---- the checkout ------------------------------------------------------------------------------------------


def find_level_dir(kernelbench_dir: Path, level: int) -> Path:
    """`DIR/KernelBench/level{N}` (a repository checkout) or `DIR/level{N}` (its KernelBench folder)."""
    kernelbench_dir = Path(kernelbench_dir)
    if not kernelbench_dir.is_dir():
        raise KernelBenchLayoutError(f"{kernelbench_dir} is not a directory: pass the path of your KernelBench checkout")
    for candidate in (kernelbench_dir / "KernelBench" / f"level{level}", kernelbench_dir / f"level{level}"):
        if candidate.is_dir():
            return candidate
    raise KernelBenchLayoutError(
        f"no level{level} folder in {kernelbench_dir}: expected {kernelbench_dir}/KernelBench/level{level}/ "
        f"(or {kernelbench_dir}/level{level}/) holding files named like 1_Name.py")


def list_level_problems(kernelbench_dir: Path, level: int) -> list[KernelBenchProblem]:
    """All problems of a level, ordered by problem id."""
    level_dir = find_level_dir(kernelbench_dir, level)
    problems = []
    for path in level_dir.iterdir():
        match = _PROBLEM_FILE.match(path.name)
        if match and path.is_file():
            problems.append(KernelBenchProblem(level, int(match.group(1)), match.group(2), path))
    if not problems:
        raise KernelBenchLayoutError(f"{level_dir} holds no problem files named like 1_Name.py")
    problems.sort(key=lambda p: p.problem_id)
    ids = [p.problem_id for p in problems]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise KernelBenchLayoutError(f"{level_dir} has several files for problem id(s) {duplicates}; keep one per id")
    return problems


def parse_problem_ids(spec: str) -> set[int]:
    """`"1-20,25,30-32"` -> ids. Raises ValueError with the offending part."""
    ids: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not match:
            raise ValueError(f"bad problem range {part!r} in {spec!r}: use ids and ranges like 1-20,25")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise ValueError(f"bad problem range {part!r}: the end is before the start")
        ids.update(range(low, high + 1))
    return ids


# ---- scoring -----------------------------------------------------------------------------------------------


def fast_p(outcomes: Iterable[tuple[bool, float | None]], num_problems: int, p: float) -> float:
    """KernelBench fast_p: #(correct and speedup > p) / num_problems.

    A correct sample whose speedup was not measured counts for p = 0 only (fast_0 is the correct rate).
    """
    if num_problems <= 0:
        raise ValueError("fast_p needs at least one problem in the level")
    hits = sum(1 for correct, speedup in outcomes
               if correct and ((speedup is None and p == 0) or (speedup is not None and speedup > p)))
    return hits / num_problems


def geometric_mean_speedup(speedups: Iterable[float | None]) -> float | None:
    """exp(mean(log s)) over the measured speedups; None when there are none."""
    logs = [math.log(s) for s in speedups if s is not None and s > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def score_level(results: Sequence[SampleResult], num_problems: int, level: int) -> LevelScore:
    """Score sample 0 of each problem as KernelBench does; with several samples also report correct@k."""
    first = {r.problem_id: r for r in results if r.sample == 0}
    outcomes = [(r.correct, r.speedup) for r in first.values()]
    samples = max((r.sample for r in results), default=0) + 1
    correct_at_k = None
    if samples > 1:
        solved = {r.problem_id for r in results if r.correct}
        correct_at_k = len(solved) / num_problems
    return LevelScore(
        level=level,
        num_problems=num_problems,
        num_evaluated=len(first),
        compile_rate=sum(r.compiled for r in first.values()) / num_problems,
        correct_rate=sum(r.correct for r in first.values()) / num_problems,
        fast_p={_fast_key(p): fast_p(outcomes, num_problems, p) for p in FAST_P_THRESHOLDS},
        geomean_speedup=geometric_mean_speedup(r.speedup for r in first.values() if r.correct),
        samples_per_problem=samples,
        correct_at_k=correct_at_k,
        compile_only=any(r.compile_only for r in first.values()),
    )


def _fast_key(p: float) -> str:
    return f"fast_{p:g}"


def result_from_verdict(problem: KernelBenchProblem, sample: int, verdict: Verdict, generated: GeneratedCandidate,
                        validation_seconds: float) -> SampleResult:
    """Map a validator Verdict onto KernelBench's compiled / correct / speedup."""
    correct = verdict.passed and verdict.cleared(Stage.CORRECT)
    return SampleResult(
        problem_id=problem.problem_id, name=problem.name, sample=sample, compiled=verdict.cleared(Stage.COMPILE),
        correct=correct, speedup=verdict.speedup if correct else None, stage=verdict.stage,
        failure_code=verdict.failure_code, failure=verdict.failure, flags=list(verdict.flags),
        compile_only=verdict.compile_only, generated_tokens=generated.tokens, generation_seconds=generated.seconds,
        validation_seconds=round(validation_seconds, 3))


# ---- the run -----------------------------------------------------------------------------------------------


@dataclass
class EvalConfig:
    """One `dice-copilot eval kernelbench` run."""

    kernelbench_dir: Path
    level: int
    out_dir: Path
    problem_ids: set[int] | None = None  # None: the whole level
    samples: int = 1
    checkpoint: str | None = None  # recorded in the report
    settings: dict = field(default_factory=dict)  # generation settings, recorded in the report
    plot: bool = True  # write speedup.png (matplotlib)


@dataclass
class EvalReport:
    """What a run wrote: per-sample results and the level scores (all problems; and the selected ones)."""

    level_score: LevelScore
    selected_score: LevelScore | None
    results: list[SampleResult]
    report_json: Path
    report_markdown: Path
    plot: Path | None


class _ResultStore:
    """Per-sample JSON files under `out/results/`, written atomically, so an interrupted run resumes."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        (out_dir / "results").mkdir(parents=True, exist_ok=True)
        (out_dir / "candidates").mkdir(exist_ok=True)

    def _path(self, problem: KernelBenchProblem, sample: int) -> Path:
        return self.out_dir / "results" / problem.key / f"sample{sample}.json"

    def load(self, problem: KernelBenchProblem, sample: int) -> SampleResult | None:
        path = self._path(problem, sample)
        if not path.is_file():
            return None
        try:
            return SampleResult.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError):
            return None  # a torn write from a killed run: evaluate that sample again

    def save(self, problem: KernelBenchProblem, result: SampleResult, generated: GeneratedCandidate) -> None:
        stem = f"{problem.key}_s{result.sample}"
        _write_atomic(self.out_dir / "candidates" / f"{stem}.txt", generated.text)
        if generated.code is not None:
            _write_atomic(self.out_dir / "candidates" / f"{stem}.py", generated.code)
        path = self._path(problem, result.sample)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps(asdict(result), indent=2))


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def run_kernelbench_eval(config: EvalConfig, generate: CandidateGenerator, validate: ValidateFunction | None = None,
                         progress: bool = True) -> EvalReport:
    """Generate, validate and score every (problem, sample) not already done in `config.out_dir`."""
    if config.samples < 1:
        raise ValueError("samples must be at least 1")
    validate = validate or strict_validate
    problems = list_level_problems(config.kernelbench_dir, config.level)
    selected = [p for p in problems if config.problem_ids is None or p.problem_id in config.problem_ids]
    if not selected:
        ids = f"{problems[0].problem_id}-{problems[-1].problem_id}"
        raise KernelBenchLayoutError(f"none of the requested problems exist in level {config.level} (it has ids {ids})")
    store = _ResultStore(Path(config.out_dir))
    claim_out_dir(config)
    results: dict[tuple[int, int], SampleResult] = {}
    todo: list[tuple[KernelBenchProblem, list[int]]] = []
    for problem in selected:
        missing = []
        for sample in range(config.samples):
            stored = store.load(problem, sample)
            if stored is None:
                missing.append(sample)
            else:
                results[(problem.problem_id, sample)] = stored
        if missing:
            todo.append((problem, missing))

    bar = _progress_bar(total=len(selected) * config.samples, done=len(results), enabled=progress,
                        description=f"level {config.level}")
    try:
        for problem, missing in todo:
            bar.set_postfix_str(problem.key[:40])
            for sample, generated in zip(missing, _generate_safely(generate, problem, len(missing))):
                result = _validate_safely(validate, problem, sample, generated)
                store.save(problem, result, generated)
                results[(problem.problem_id, sample)] = result
                bar.update(1)
    finally:
        bar.close()

    ordered = [results[k] for k in sorted(results)]
    level_score = score_level(ordered, len(problems), config.level)
    selected_score = None
    if len(selected) != len(problems):
        selected_score = score_level(ordered, len(selected), config.level)
    return _write_reports(config, level_score, selected_score, ordered)


def claim_out_dir(config: EvalConfig) -> None:
    """Record what produced the results in `out/run.json`; refuse to mix in results of another run."""
    identity = {"level": config.level, "checkpoint": config.checkpoint, "generation": config.settings,
                "kernelbench_dir": str(Path(config.kernelbench_dir).resolve())}
    path = Path(config.out_dir) / "run.json"
    if path.is_file():
        previous = json.loads(path.read_text())
        if previous != identity:
            changed = sorted(k for k in identity if previous.get(k) != identity[k])
            raise KernelBenchLayoutError(
                f"{config.out_dir} holds results of a run with a different {', '.join(changed)}; "
                "pass another --out (or delete that folder) so results are not mixed")
    else:
        _write_atomic(path, json.dumps(identity, indent=2))


def _generate_safely(generate: CandidateGenerator, problem: KernelBenchProblem, n: int) -> list[GeneratedCandidate]:
    """A generator failure on one problem (e.g. out of memory on a long prompt) is recorded, not fatal."""
    try:
        generated = generate(problem.path.read_text(), n)
    except Exception as error:  # noqa: BLE001 - recorded per problem; the run goes on
        return [GeneratedCandidate(text=f"generation failed: {type(error).__name__}: {error}", code=None,
                                   finish_reason="error")] * n
    if len(generated) != n:
        raise RuntimeError(f"the generator returned {len(generated)} candidates for {problem.key}, expected {n}")
    return generated


def _validate_safely(validate: ValidateFunction, problem: KernelBenchProblem, sample: int,
                     generated: GeneratedCandidate) -> SampleResult:
    if generated.code is None:
        generation_failed = generated.finish_reason == "error"
        return SampleResult(problem.problem_id, problem.name, sample, compiled=False, correct=False,
                            failure_code=FailureCode.GENERATION_ERROR if generation_failed else FailureCode.NO_CODE,
                            failure=generated.text if generation_failed else "the answer holds no complete ``` code block",
                            generated_tokens=generated.tokens, generation_seconds=generated.seconds)
    started = time.perf_counter()
    try:
        verdict = validate(problem.path, generated.code)
    except Exception as error:  # noqa: BLE001 - one broken verdict must not end a 100-problem run
        return SampleResult(problem.problem_id, problem.name, sample, compiled=False, correct=False,
                            failure_code=FailureCode.VALIDATOR_ERROR, failure=f"{type(error).__name__}: {error}",
                            generated_tokens=generated.tokens, generation_seconds=generated.seconds,
                            validation_seconds=round(time.perf_counter() - started, 3))
    return result_from_verdict(problem, sample, verdict, generated, time.perf_counter() - started)


def strict_validate(problem_path: Path, candidate_source: str):
    """The default validator: the project's `validate` in strict mode (the candidate runs in a worker process)."""
    from dice_copilot.validator import validate

    return validate(Path(problem_path), candidate_source, policy="strict")


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, done: int, enabled: bool, description: str):
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=description, unit="sample", dynamic_ncols=True)


# ---- the engine as a generator -----------------------------------------------------------------------------


@dataclass
class GenerationSettings:
    """Decoding settings for KernelBench generation (see BlockDiffusionEngine.generate)."""

    strategy: str = DEFAULT_STRATEGY
    threshold: float = DEFAULT_THRESHOLD
    max_new_tokens: int = 2048
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    steps_per_block: int | None = None  # None: the block size
    seed: int | None = 0


class EngineGenerator:
    """Generates whole `ModelNew` modules with the DICE end-to-end prompt and keeps the first code block."""

    def __init__(self, checkpoint: str | None, device: str | None = None,
                 settings: GenerationSettings | None = None) -> None:
        from dice_copilot.model import load
        from dice_copilot.model.engine import BlockDiffusionEngine

        model, tokenizer = load(checkpoint, device=device or _default_device())
        self.engine = BlockDiffusionEngine(model, tokenizer)
        self.settings = settings or GenerationSettings()

    def __call__(self, reference_source: str, n: int) -> list[GeneratedCandidate]:
        from dice_copilot.model.prompts import end_to_end_prompt, extract_first_code

        s = self.settings
        generations = self.engine.generate(
            [end_to_end_prompt(reference_source)], n=n, strategy=s.strategy, threshold=s.threshold,
            max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
            steps_per_block=s.steps_per_block, seed=s.seed)
        return [GeneratedCandidate(text=g.text, code=extract_first_code(g.text), tokens=g.stats.generated_tokens,
                                   seconds=round(g.stats.wall_time_s, 3), finish_reason=g.finish_reason)
                for g in generations]


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---- reports -----------------------------------------------------------------------------------------------


def _write_reports(config: EvalConfig, level_score: LevelScore, selected_score: LevelScore | None,
                   results: list[SampleResult]) -> EvalReport:
    out_dir = Path(config.out_dir)
    report = {
        "benchmark": "KernelBench",
        "kernelbench_dir": str(config.kernelbench_dir),
        "level": config.level,
        "checkpoint": config.checkpoint,
        "generation": config.settings,
        "policy": "strict",
        "scoring": "sample 0 per problem; fast_p = #(correct and speedup > p) / #problems in the level",
        "hardware": _hardware(),
        "level_score": asdict(level_score),
        "selected_score": asdict(selected_score) if selected_score else None,
        "results": [asdict(r) for r in results],
    }
    report_json = out_dir / "report.json"
    _write_atomic(report_json, json.dumps(report, indent=2))
    report_markdown = out_dir / "report.md"
    _write_atomic(report_markdown, markdown_report(config, level_score, selected_score, results))
    plot = None
    if config.plot:
        plot = out_dir / "speedup.png"
        plot_speedups(results, level_score, plot)
    return EvalReport(level_score, selected_score, results, report_json, report_markdown, plot)


def _hardware() -> dict:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return {}
    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _score_row(label: str, score: LevelScore) -> str:
    fast = " | ".join(_percent(score.fast_p[_fast_key(p)]) for p in FAST_P_THRESHOLDS)
    geomean = "n/a" if score.geomean_speedup is None else f"{score.geomean_speedup:.2f}×"
    return (f"| {label} | {score.num_evaluated}/{score.num_problems} | {_percent(score.compile_rate)} | "
            f"{_percent(score.correct_rate)} | {fast} | {geomean} |")


def markdown_report(config: EvalConfig, level_score: LevelScore, selected_score: LevelScore | None,
                    results: list[SampleResult]) -> str:
    """The level summary table plus one row per sample."""
    fast_headers = " | ".join(f"fast_{p:g}" for p in FAST_P_THRESHOLDS)
    lines = [
        f"# KernelBench level {config.level}",
        "",
        f"Checkpoint: `{config.checkpoint}` · policy: strict · samples per problem: {config.samples}",
        "",
        f"| scope | evaluated | compile | correct | {fast_headers} | geomean speedup (correct) |",
        "|---|---|---|---|" + "---|" * len(FAST_P_THRESHOLDS) + "---|",
        _score_row(f"level {config.level} (all problems)", level_score),
    ]
    if selected_score is not None:
        lines.append(_score_row("selected problems", selected_score))
    notes = ["Rates use all problems of the level as the denominator; unevaluated problems count as failures "
             "(KernelBench convention). Speedup = median reference time / median candidate time."]
    if level_score.correct_at_k is not None:
        notes.append(f"correct@{level_score.samples_per_problem} (any sample correct): "
                     f"{_percent(level_score.correct_at_k)}.")
    if level_score.compile_only:
        notes.append("No CUDA device: candidates were only compiled, so correctness and speed were not run.")
    lines += ["", *notes, "", "| problem | sample | compiled | correct | speedup | result |", "|---|---|---|---|---|---|"]
    for r in results:
        speedup = "" if r.speedup is None else f"{r.speedup:.2f}×"
        outcome = "passed" if r.correct else (r.failure_code or "failed")
        if r.failure and not r.correct:
            outcome += ": " + r.failure.splitlines()[0][:100].replace("|", "\\|")
        lines.append(f"| {r.problem_id}_{r.name} | {r.sample} | {'yes' if r.compiled else 'no'} | "
                     f"{'yes' if r.correct else 'no'} | {speedup} | {outcome} |")
    return "\n".join(lines) + "\n"


def plot_speedups(results: list[SampleResult], level_score: LevelScore, path: Path) -> None:
    """Left: speedup of sample 0 per problem (log scale, grey = not correct). Right: fast_p as p varies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = sorted((r for r in results if r.sample == 0), key=lambda r: r.problem_id)
    figure, (bars, curve) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    timed = [(i, r.speedup) for i, r in enumerate(first) if r.correct and r.speedup]
    bars.bar([i for i, _ in timed], [s - 1.0 for _, s in timed], bottom=1.0,
             color=["#2e7d32" if s > 1 else "#ef6c00" for _, s in timed])
    failed = [i for i, r in enumerate(first) if not r.correct]
    bars.scatter(failed, [1.0] * len(failed), marker="x", color="#9e9e9e", zorder=3)
    bars.axhline(1.0, color="black", linewidth=0.8)
    bars.set_yscale("log")
    speeds = [s for _, s in timed] + [1.0]
    bars.set_ylim(min(speeds) / 1.5, max(speeds) * 1.5)
    bars.set_xticks(range(len(first)), [str(r.problem_id) for r in first], rotation=90, fontsize=7)
    bars.set_xlabel("problem id (x: not correct)")
    bars.set_ylabel("speedup vs PyTorch eager (log)")
    bars.set_title(f"KernelBench level {level_score.level}: speedup per problem")

    measured = [(r.correct, r.speedup) for r in first]
    top = max([2.5] + [s * 1.1 for c, s in measured if c and s])
    grid = [top * i / 200 for i in range(201)]
    curve.plot(grid, [fast_p(measured, level_score.num_problems, p) for p in grid], color="#1565c0")
    curve.scatter(FAST_P_THRESHOLDS, [level_score.fast_p[_fast_key(p)] for p in FAST_P_THRESHOLDS],
                  color="#1565c0", zorder=3)
    curve.set_xlabel("speedup threshold p")
    curve.set_ylabel("fast_p")
    curve.set_ylim(0, 1)
    curve.set_title("fast_p")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
