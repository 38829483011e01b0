"""Held-out scores of a checkpoint, beside a baseline checkpoint's: what the recipe's stages and the decoding defaults
are chosen by (issue 32). Never KernelBench: its problems are the final benchmark and are not read here.

Two held-out sets, each optional:
- CuKe's held-out split (`--cuke-heldout eval_heldout.jsonl`: families and compositions no training pair has), each
  row a reference module and its validated solution;
- a folder of user-style problems (`--user-problems DIR`, e.g. bench/heldout_user_style): DIR/NAME/problem.py
  defines Model, get_inputs and get_init_inputs; DIR/NAME/solution.py, when present, is an honest ModelNew solution
  (for infill).

For each set and checkpoint, with the real engine and the strict validator:
- end to end (DICE's prompt -> ModelNew): compile rate, correct rate (exec@1, greedy), fast_1 (correct and faster
  than PyTorch), and validated best-of-N (N sampled candidates; a problem counts as solved when one validates);
- infill (the editor's path): every `__global__` body of each solution blanked in turn, N candidates decoded into
  the hole and validated in the solution's own file; the share of requests with a validated suggestion and the
  request latency (decoding plus validating the candidates) p50/p95.

Without a CUDA device the validator compiles but cannot run kernels, so the eval runs in compile-only mode and says
so: "validated" then means it compiles, and correct rate and fast_1 are not measured.

Decoding comes from the flags, else the checkpoint's generation_config.json (its decoding defaults), else the
engine's defaults; `--write-defaults` writes the settings used into the checkpoint's generation_config.json, after
the measurement that chose them.

    python bench/model_eval.py --checkpoint runs/dice-tiny/rl-e2e/checkpoint --cuke-heldout cuke/eval_heldout.jsonl \\
        --user-problems bench/heldout_user_style --out results/model_eval.json [--baseline default] [--candidates 8]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from dice_copilot.model.decoding import (DEFAULT_SAMPLING_TEMPERATURE, DEFAULT_STRATEGY, DEFAULT_THRESHOLD,
                                        STRATEGIES, choose_decoding)

DEFAULT_CANDIDATES = 8
# Tokens per answer where neither a flag nor the checkpoint says: a whole ModelNew file on a GPU; on a CPU (compile-
# only plumbing runs) a short answer.
GPU_MAX_NEW_TOKENS, CPU_MAX_NEW_TOKENS = 2048, 128
COMPILE_ONLY_NOTE = ("compile-only mode: no CUDA device, so kernels are compiled but not run; 'validated' means it "
                     "compiles, and correct rate and fast_1 are not measured")
# `problems` is recorded with the rates: a --limit run's scores are of fewer problems, and compare only with runs of as
# many.
HEADLINE = ("problems", "compile_rate", "correct_rate", "fast_1", "best_of_n", "infill_validated", "infill_p50_s",
            "infill_p95_s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from dice_copilot.model.checkpoint import CheckpointError
    from dice_copilot.validator import Budget, ValidatorPool

    if not args.cuke_heldout and not args.user_problems:
        print("error: name a held-out set: --cuke-heldout FILE and/or --user-problems DIR", file=sys.stderr)
        return 2
    try:
        sets = load_sets(args)
    except EvalInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    pool = ValidatorPool()
    compile_only = not pool.has_gpu
    if compile_only:
        print(f"model_eval: {COMPILE_ONLY_NOTE}", file=sys.stderr)
    budget = Budget(timing=not compile_only, compile_timeout_s=args.compile_timeout_s)
    answers = []  # every greedy answer of every column, for --dump
    columns = {"ours": args.checkpoint} if args.no_baseline else {"ours": args.checkpoint, "baseline": args.baseline}
    report = {"mode": "compile-only" if compile_only else "full", "device": _device_name(device),
              "sets": {s.name: {"problems": len(s.problems), "infill_requests": s.infill_requests} for s in sets},
              "columns": {}}
    try:
        for column, checkpoint in columns.items():
            generator = EngineGenerator(checkpoint, device, decoding_flags(args))
            print(f"model_eval: {column} = {checkpoint} ({generator.decoding.describe()})", file=sys.stderr)
            column_answers = []
            scores = {s.name: score_set(s, generator, pool, budget, compile_only, column_answers) for s in sets}
            answers += [{"column": column, **answer} for answer in column_answers]
            report["columns"][column] = {"checkpoint": str(checkpoint), "untrained": generator.untrained,
                                         "decoding": asdict(generator.decoding), "scores": scores}
            if column == "ours" and args.write_defaults:
                generator.write_defaults(checkpoint)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        pool.shutdown()
    print(report_table(report))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.dump is not None:
        args.dump.parent.mkdir(parents=True, exist_ok=True)
        args.dump.write_text("".join(json.dumps(answer) + "\n" for answer in answers))
    if args.record is not None:
        record_in_recipe(args.record, report)
    return 0


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder to score ('default': the embedded one)")
    parser.add_argument("--baseline", default="default",
                        help="checkpoint scored beside it (default: the embedded untrained default)")
    parser.add_argument("--no-baseline", action="store_true", help="score --checkpoint alone")
    parser.add_argument("--cuke-heldout", type=Path, metavar="FILE", help="CuKe's eval_heldout.jsonl")
    parser.add_argument("--user-problems", type=Path, metavar="DIR",
                        help="folder of NAME/problem.py problems (NAME/solution.py: an honest solution, for infill)")
    parser.add_argument("--limit", type=int, help="the first N problems of each set")
    parser.add_argument("--strategy", choices=STRATEGIES, help=f"decoding strategy (default: the checkpoint's, else "
                                                              f"{DEFAULT_STRATEGY})")
    parser.add_argument("--threshold", type=float, help=f"dynamic strategy's τ (default: the checkpoint's, else "
                                                        f"{DEFAULT_THRESHOLD})")
    parser.add_argument("--block-size", type=int, help="decode in blocks of this many tokens (default: the one the "
                                                       "checkpoint was trained at)")
    parser.add_argument("--steps-per-block", type=int, help="denoising steps a block's masks are spread over "
                                                            "(default: the checkpoint's, else the block size)")
    parser.add_argument("--temperature", type=float, help=f"sampling temperature of best-of-N and infill candidates "
                                                          f"(default: the checkpoint's, else "
                                                          f"{DEFAULT_SAMPLING_TEMPERATURE}); exec@1 is greedy")
    parser.add_argument("--candidates", type=int, help=f"N of best-of-N and of infill (default: the checkpoint's "
                                                       f"num_return_sequences, else {DEFAULT_CANDIDATES}); 0 skips "
                                                       f"best-of-N")
    parser.add_argument("--max-new-tokens", type=int, help=f"tokens per answer (default: the checkpoint's, else "
                                                           f"{GPU_MAX_NEW_TOKENS} on a GPU, {CPU_MAX_NEW_TOKENS} on "
                                                           f"the CPU)")
    parser.add_argument("--no-infill", action="store_true", help="skip the infill requests")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--device", help="torch device (default: cuda when present, else cpu)")
    parser.add_argument("--compile-timeout-s", type=float, default=180.0, help="per build")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--dump", type=Path, metavar="FILE",
                        help="write every greedy end-to-end answer with its verdict here, one JSON object a line (what "
                             "the model writes, for reading its failures)")
    parser.add_argument("--write-defaults", action="store_true",
                        help="write the decoding settings used into --checkpoint's generation_config.json")
    parser.add_argument("--record", metavar="RECIPE_DIR:STAGE",
                        help="add the headline scores to that stage's held-out scores in the recipe's progress log")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1 or args.candidates is not None and args.candidates < 0:
        parser.error("--limit must be >= 1 and --candidates >= 0")
    return args


# --- the held-out sets ----------------------------------------------------------------------------------------------


class EvalInputError(ValueError):
    """A held-out set that cannot be read; the message names the file."""


@dataclass
class Problem:
    name: str
    reference: str
    # An honest ModelNew solution (its kernel bodies become the infill requests), or None.
    solution: str | None = None


@dataclass
class InfillRequest:
    """One kernel body of a solution, blanked: the model fills the hole between `prefix` and `suffix`."""

    problem: Problem
    kernel: str
    prefix: str
    suffix: str


@dataclass
class EvalSet:
    name: str
    problems: list[Problem]
    requests: list[InfillRequest] = field(default_factory=list)

    @property
    def infill_requests(self) -> int:
        return len(self.requests)


def load_sets(args) -> list[EvalSet]:
    sets = []
    if args.cuke_heldout:
        sets.append(EvalSet("cuke_heldout", cuke_problems(args.cuke_heldout)[: args.limit]))
    if args.user_problems:
        sets.append(EvalSet("user_style", user_problems(args.user_problems)[: args.limit]))
    for evaluated in sets:
        if not evaluated.problems:
            raise EvalInputError(f"the {evaluated.name} set has no problems")
        if not args.no_infill:
            evaluated.requests = [r for p in evaluated.problems if p.solution for r in infill_requests(p)]
    return sets


def cuke_problems(path: Path) -> list[Problem]:
    """CuKe's held-out rows: `pytorch_code` and its validated `cuda_code`."""
    from dice_copilot.trainer.jsonl import json_objects

    if not path.is_file():
        raise EvalInputError(f"{path} does not exist (CuKe writes eval_heldout.jsonl: `dice-copilot train cuke build`)")
    problems = []
    for where, row in json_objects(path, EvalInputError):
        if not isinstance(row.get("pytorch_code"), str):
            raise EvalInputError(f"{where}: a held-out row needs `pytorch_code`")
        problems.append(Problem(str(row.get("id", where)), row["pytorch_code"], row.get("cuda_code") or None))
    return problems


def user_problems(folder: Path) -> list[Problem]:
    """DIR/NAME/problem.py problems in name order, each with DIR/NAME/solution.py when that exists."""
    from dice_copilot.validator.problem import InputError
    from dice_copilot.validator.problem import Problem as ValidatorProblem

    if not folder.is_dir():
        raise EvalInputError(f"{folder} is not a folder of problems")
    problems = []
    for path in sorted(folder.glob("*/problem.py")):
        source = path.read_text(encoding="utf-8")
        try:
            ValidatorProblem.from_source(source, path=path)  # what `validate` accepts as a reference
        except InputError as err:
            raise EvalInputError(f"{path}: {err}") from None
        solution = path.with_name("solution.py")
        problems.append(Problem(path.parent.name, source,
                                solution.read_text(encoding="utf-8") if solution.is_file() else None))
    return problems


def infill_requests(problem: Problem) -> list[InfillRequest]:
    """One request per closed `__global__` body of the solution's CUDA strings (the bodies the editor fills)."""
    from dice_copilot.server.context import cuda_regions

    requests = []
    for region in cuda_regions(problem.solution, "python"):
        for kernel in region.scan.kernels:
            if kernel.qualifier == "__global__" and kernel.closed:
                start, end = region.start + kernel.body_start, region.start + kernel.body_end
                requests.append(InfillRequest(problem, kernel.name, problem.solution[:start], problem.solution[end:]))
    return requests


# --- decoding -------------------------------------------------------------------------------------------------------


@dataclass
class Decoding:
    strategy: str
    threshold: float
    block_size: int
    steps_per_block: int | None
    temperature: float
    candidates: int
    max_new_tokens: int
    seed: int

    def describe(self) -> str:
        return (f"{self.strategy}, τ {self.threshold}, block {self.block_size}, T {self.temperature} for "
                f"{self.candidates} candidates, {self.max_new_tokens} new tokens")


def decoding_flags(args) -> dict:
    """The decoding settings the flags fix (the others come from each checkpoint)."""
    names = ("strategy", "threshold", "block_size", "steps_per_block", "temperature", "candidates", "max_new_tokens")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None} | {"seed": args.seed}


class EngineGenerator:
    """A checkpoint in the BlockDiffusionEngine, decoding with the flags over its generation_config.json defaults."""

    def __init__(self, checkpoint: str, device: str, flags: dict):
        from dice_copilot.model import load
        from dice_copilot.model.checkpoint import read_decoding_defaults
        from dice_copilot.model.engine import BlockDiffusionEngine

        model, tokenizer = load(checkpoint, device=device)
        self.trained_block_size = model.config.block_size
        chosen = choose_decoding(
            {**flags, "num_return_sequences": flags.get("candidates")}, read_decoding_defaults(checkpoint),
            {"strategy": DEFAULT_STRATEGY, "threshold": DEFAULT_THRESHOLD, "steps_per_block": None,
             "temperature": DEFAULT_SAMPLING_TEMPERATURE, "num_return_sequences": DEFAULT_CANDIDATES,
             "max_new_tokens": CPU_MAX_NEW_TOKENS if device == "cpu" else GPU_MAX_NEW_TOKENS})
        self.decoding = Decoding(
            strategy=chosen["strategy"].value, threshold=chosen["threshold"].value,
            block_size=flags.get("block_size", self.trained_block_size),
            steps_per_block=chosen["steps_per_block"].value, temperature=chosen["temperature"].value,
            candidates=chosen["num_return_sequences"].value, max_new_tokens=chosen["max_new_tokens"].value,
            seed=flags["seed"])
        if self.decoding.block_size != self.trained_block_size:
            model.config = replace(model.config, block_size=self.decoding.block_size)
        self.untrained = bool(model.config.untrained)
        self.engine = BlockDiffusionEngine(model, tokenizer, device=device)

    def __call__(self, prompts: list[str], n: int, sample: bool) -> list[list]:
        """n answers per prompt (greedy when not `sample`), as Generations grouped by prompt."""
        d = self.decoding
        generations = self.engine.generate(
            prompts, n=n, strategy=d.strategy, threshold=d.threshold, max_new_tokens=d.max_new_tokens,
            temperature=d.temperature if sample else 0.0, steps_per_block=d.steps_per_block, seed=d.seed)
        return [generations[i * n:(i + 1) * n] for i in range(len(prompts))]

    def write_defaults(self, checkpoint: str) -> None:
        from dice_copilot.model.checkpoint import write_decoding_defaults

        d = self.decoding
        if d.block_size != self.trained_block_size:
            raise SystemExit(f"error: --write-defaults with --block-size {d.block_size}: the checkpoint was trained "
                             f"at {self.trained_block_size}, which decoding must keep by default")
        path = write_decoding_defaults(checkpoint, {
            "strategy": d.strategy, "threshold": d.threshold, "steps_per_block": d.steps_per_block,
            "temperature": d.temperature, "num_return_sequences": d.candidates or None,
            "max_new_tokens": d.max_new_tokens})
        print(f"model_eval: wrote the decoding defaults to {path}", file=sys.stderr)


# --- scoring --------------------------------------------------------------------------------------------------------


def score_set(evaluated: EvalSet, generate, pool, budget, compile_only: bool, answers: list | None = None) -> dict:
    """The set's scores for one generator: `generate(prompts, n, sample) -> [[Generation]]` with its `decoding` (see
    EngineGenerator). Only the greedy answers are timed (for fast_1); candidates are judged on correctness. Each
    greedy answer with its verdict is appended to `answers` when given."""
    from dice_copilot.model.prompts import end_to_end_prompt, extract_first_code, infill_prompt, splice_infill

    problems = evaluated.problems
    n = len(problems)
    prompts = [end_to_end_prompt(p.reference) for p in problems]
    greedy = [group[0] for group in generate(prompts, 1, False)]
    verdicts = _validate(pool, budget, [(p.reference, extract_first_code(g.text)) for p, g in zip(problems, greedy)])
    correct = [_correct(v, compile_only) for v in verdicts]
    if answers is not None:
        answers += [{"set": evaluated.name, "problem": p.name, "answer": g.text, "compiled": _compiled(v),
                     "correct": c, "verdict": v.summary()} for p, g, v, c in zip(problems, greedy, verdicts, correct)]
    scores = {
        "problems": n,
        "compile_rate": sum(_compiled(v) for v in verdicts) / n,
        "correct_rate": None if compile_only else sum(correct) / n,
        "fast_1": None if compile_only else sum(c and (v.speedup or 0) > 1 for c, v in zip(correct, verdicts)) / n,
        "tokens_per_forward": sum(g.stats.tokens_per_forward for g in greedy) / n,
    }
    candidates, untimed = generate.decoding.candidates, replace(budget, timing=False)
    if candidates:
        sampled = generate(prompts, candidates, True)
        items = [(p.reference, extract_first_code(g.text)) for p, group in zip(problems, sampled) for g in group]
        validated = [_validated(v, compile_only) for v in _validate(pool, untimed, items)]
        scores["best_of_n"] = sum(any(validated[i * candidates:(i + 1) * candidates]) for i in range(n)) / n
    if evaluated.requests:
        latencies, answered = [], 0
        for request in evaluated.requests:  # one at a time, as the editor asks
            started = time.perf_counter()
            prompt = infill_prompt(request.problem.reference, request.prefix, request.suffix)
            [group] = generate([prompt], max(1, candidates), max(1, candidates) > 1)
            middles = [splice_infill(request.prefix, request.suffix, g.text) for g in group]
            files = [None if m is None else request.prefix + m + request.suffix for m in middles]
            verdicts = _validate(pool, untimed, [(request.problem.reference, f) for f in files])
            latencies.append(time.perf_counter() - started)
            answered += any(_validated(v, compile_only) for v in verdicts)
        scores.update(infill_validated=answered / len(evaluated.requests), infill_p50_s=_percentile(latencies, 50),
                      infill_p95_s=_percentile(latencies, 95))
    return scores


def _validate(pool, budget, items: list[tuple[str, str | None]]) -> list:
    """Strict verdicts of (reference, candidate source) pairs; a missing candidate (no code in the answer) gets a
    failed verdict without a build."""
    from dice_copilot.validator.verdict import FailureCode, Verdict

    present = [(i, item) for i, item in enumerate(items) if item[1] is not None]
    verdicts = [Verdict(failure="no code in the answer", failure_code=FailureCode.NO_CODE)] * len(items)
    for (i, _), verdict in zip(present, pool.validate_many([item for _, item in present], "strict", budget)):
        verdicts[i] = verdict
    return verdicts


def _compiled(verdict) -> bool:
    from dice_copilot.validator.verdict import Stage

    return verdict.cleared(Stage.COMPILE)


def _correct(verdict, compile_only: bool) -> bool:
    return not compile_only and verdict.passed and not verdict.compile_only


def _validated(verdict, compile_only: bool) -> bool:
    """What the editor would show: a passed verdict (on a machine without a GPU, a compile-checked one)."""
    return verdict.passed and (compile_only or not verdict.compile_only)


def _percentile(values: list[float], q: float) -> float:
    """The q-th percentile by linear interpolation between the closest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# --- reporting ------------------------------------------------------------------------------------------------------


def report_table(report: dict) -> str:
    columns = list(report["columns"])
    lines = [f"held-out scores ({report['mode']}, {report['device']})"]
    for column, values in report["columns"].items():
        lines.append(f"{column}: {values['checkpoint']}{' (UNTRAINED)' if values['untrained'] else ''}, "
                     f"{Decoding(**values['decoding']).describe()}")
    if report["mode"] == "compile-only":
        lines.append(f"note: {COMPILE_ONLY_NOTE}")
    header = "| set | metric | " + " | ".join(columns) + (" | ratio |" if len(columns) == 2 else " |")
    lines += ["", header, "|" + "---|" * (len(columns) + 2 + (len(columns) == 2))]
    for name in report["sets"]:
        for metric in HEADLINE + ("tokens_per_forward",):
            values = [report["columns"][c]["scores"][name].get(metric, "absent") for c in columns]
            if all(v == "absent" for v in values):
                continue
            cells = [_cell(v) for v in values]
            ratio = [_ratio(*values)] if len(columns) == 2 else []
            lines.append(f"| {name} | {metric} | " + " | ".join(cells + ratio) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "not measured"
    if value == "absent":
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _ratio(ours, baseline) -> str:
    if not isinstance(ours, (int, float)) or not isinstance(baseline, (int, float)):
        return "-"
    if baseline == 0:
        return "-" if ours == 0 else "inf"
    return f"{ours / baseline:.2f}x"


def record_in_recipe(target: str, report: dict) -> None:
    """Our column's headline scores into a recipe stage's held-out scores (trainer/recipe.py's progress log)."""
    from dice_copilot.trainer.recipe import record_heldout_scores

    folder, _, stage = target.rpartition(":")
    scores = {f"{name}.{metric}": value for name, values in report["columns"]["ours"]["scores"].items()
              for metric, value in values.items() if metric in HEADLINE and value is not None}
    record_heldout_scores(Path(folder), stage, f"model_eval ({report['mode']})", scores)


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


if __name__ == "__main__":
    sys.exit(main())
