"""`dice-copilot generate`: run a checkpoint by hand on a raw prompt, a PyTorch module (DICE end-to-end), or an
infill skeleton, and print the code (or the raw answer) to stdout.

The input is checked before any model is loaded: a module must pass the same checks `dice-copilot validate` applies
to a reference (it parses, defines `Model` and `get_inputs`), and an infill skeleton must hold its marker. While
decoding, a terminal shows a progress line that is erased at the end, so the result is printed once; `--stream`
writes the committed text to stderr as it is decoded instead.

What the copilot shows is validated first, and so is what this command prints: every end-to-end or infill
candidate is validated against its PyTorch reference (`dice-copilot validate`'s checks: compiled, run against the
reference on the GPU, timed; compile-checked only without a CUDA device, and said so), and stdout gets the best one
that passed, or nothing (exit 1; 3 when this machine could not check them). `--no-validate` prints the model's
output unchecked. Decoding settings are the flags, else the checkpoint's generation_config.json, else the built-in
defaults (model/decoding.py: choose_decoding).
"""

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from dice_copilot.cli import EXIT_USAGE, positive_int

from dice_copilot.validator.commands import EXIT_FAILED, EXIT_NOT_CHECKED
from dice_copilot.validator.static_checks import POLICIES

from .decoding import (DEFAULT_SAMPLING_TEMPERATURE, DEFAULT_STRATEGY, DEFAULT_THRESHOLD, STRATEGIES, DecodingChoice,
                       choose_decoding)
from .prompts import end_to_end_prompt, extract_first_code, infill_prompt, splice_infill

MODES = ("raw", "e2e", "infill")
DEFAULT_FILL_MARKER = "<FILL>"
# A by-hand run should answer in seconds: a GPU decodes 1,024 tokens in that time (DICE-1.7B on an H200: ~630 tok/s
# at batch 1, BENCHMARKS.md), a CPU is far slower (the embedded checkpoint on 2 shared cores: 256 tokens in 1-4 s,
# 1,024 in 5-14 s), so the CPU default is shorter.
GPU_DEFAULT_MAX_NEW_TOKENS = 1024
CPU_DEFAULT_MAX_NEW_TOKENS = 256
# Below this many parameters a CPU decoding pass is a few microsecond-sized matmuls, cheaper than synchronising
# torch's intra-op threads; where other processes share the cores, those threads made the embedded default
# checkpoint's 256 tokens take 12-99 s instead of 1-4 s with one thread (2 cores, 5-9 runnable processes).
ONE_THREAD_MAX_PARAMETERS = 10_000_000


class UsageError(ValueError):
    """Bad command-line input; the message says what to change."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="generate with a DICE checkpoint from a prompt, a file or a PyTorch module",
        description=(
            "Generate with a DICE block-diffusion checkpoint. --module FILE.py builds DICE's end-to-end prompt "
            "from a PyTorch Model and prints the ModelNew code; --mode infill fills the "
            f"{DEFAULT_FILL_MARKER} marker of a kernel skeleton; --mode raw sends the text as is. The result goes "
            "to stdout, the stats line and notes to stderr."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", metavar="TEXT",
                        help="the prompt text (raw), PyTorch code (e2e) or skeleton (infill)")
    source.add_argument("--file", type=Path, metavar="FILE", help="read that text from a file")
    source.add_argument("--module", type=Path, metavar="FILE.py",
                        help="a PyTorch module with class Model and get_inputs(): DICE end-to-end prompt, prints "
                             "ModelNew code")
    parser.add_argument("--checkpoint", default="default", metavar="PATH",
                        help="checkpoint folder (default: the embedded default checkpoint, which is UNTRAINED)")
    parser.add_argument("--mode", choices=MODES,
                        help="how to build the prompt: raw text, DICE end-to-end, or DICE infilling "
                             "(default: e2e with --module, raw otherwise)")
    parser.add_argument("--reference", type=Path, metavar="FILE.py",
                        help="infill mode: the PyTorch reference module the skeleton implements")
    parser.add_argument("--fill-marker", default=DEFAULT_FILL_MARKER, metavar="TEXT",
                        help="infill mode: where the code goes in the skeleton")
    parser.add_argument("-n", type=positive_int, metavar="N",
                        help="candidates to generate; the best one that passes validation is printed (default: the "
                             "checkpoint's generation_config.json num_return_sequences, else 1)")
    parser.add_argument("--strategy", choices=STRATEGIES,
                        help="which masked tokens to commit per denoising pass (default: the checkpoint's "
                             f"generation_config.json, else {DEFAULT_STRATEGY})")
    parser.add_argument("--threshold", type=float,
                        help="dynamic strategy: commit every token whose confidence exceeds this (default: the "
                             f"checkpoint's generation_config.json, else {DEFAULT_THRESHOLD})")
    parser.add_argument("--max-new-tokens", type=positive_int, metavar="N",
                        help=f"most tokens to generate per candidate (default: the checkpoint's, else "
                             f"{GPU_DEFAULT_MAX_NEW_TOKENS} on a GPU, {CPU_DEFAULT_MAX_NEW_TOKENS} on the CPU)")
    parser.add_argument("--temperature", type=float,
                        help=f"sampling temperature; 0: greedy (default: 0 for one candidate; for several, the "
                             f"checkpoint's, else {DEFAULT_SAMPLING_TEMPERATURE})")
    parser.add_argument("--top-k", type=int, metavar="K",
                        help="sample among the K likeliest; 0: off (default: the checkpoint's, else 0)")
    parser.add_argument("--top-p", type=float, metavar="P",
                        help="nucleus sampling; 1.0: off (default: the checkpoint's, else 1.0)")
    parser.add_argument("--seed", type=int,
                        help="sampling seed, for reproducible candidates at temperature > 0 (default: torch's "
                             "global generator)")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                        help="weight dtype (default: the checkpoint's)")
    parser.add_argument("--no-validate", action="store_true",
                        help="print every candidate as decoded, unchecked (default: e2e and infill candidates are "
                             "validated against their reference and only the best that passes is printed)")
    parser.add_argument("--policy", choices=POLICIES, default="ide",
                        help="validation policy, as `dice-copilot validate --policy` (default: ide)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with every candidate, its verdict and stats")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--stream", action="store_true",
                       help="write the text to stderr as each block is committed (default: a progress line when "
                            "stderr is a terminal, nothing otherwise)")
    shown.add_argument("--quiet", action="store_true", help="nothing on stderr while decoding")
    parser.set_defaults(run=run_generate)


def run_generate(args) -> int:
    try:
        mode, prompt, skeleton, reference = build_prompt(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    validating = reference is not None and not args.no_validate

    import torch

    from .checkpoint import UNTRAINED_WARNING, CheckpointError, load, read_decoding_defaults
    from .engine import BlockDiffusionEngine

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        on_cpu = torch.device(device).type == "cpu"
    except RuntimeError as err:
        print(f"error: --device {device}: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        model, tokenizer = load(args.checkpoint, device=device, dtype=args.dtype)
        decoding = choose_generate_decoding(args, read_decoding_defaults(args.checkpoint), on_cpu)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    settings = {key: choice.value for key, choice in decoding.items()}
    n, max_new_tokens = settings.pop("num_return_sequences"), settings["max_new_tokens"]
    untrained = bool(model.config.untrained)

    engine = BlockDiffusionEngine(model, tokenizer, device=device)
    display = _decoding_display(args, n * max_new_tokens)
    try:
        with _decoding_threads(model, on_cpu):
            generations = engine.generate([prompt], n=n, seed=args.seed, on_block=display, **settings)
    except ValueError as err:  # e.g. prompt + max_new_tokens longer than the model's positions
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if display is not None:
            display.close()

    codes = [result_code(mode, g.text, skeleton) for g in generations]
    # An infill answer is the code that fills the skeleton: the filled skeleton is what runs.
    whole = codes if skeleton is None else [None if c is None else skeleton[0] + c + skeleton[1] for c in codes]
    verdicts = validate_candidates(whole, reference, args) if validating else [None] * len(codes)
    shown = best_candidate(verdicts) if validating else None
    if args.json:
        print(json.dumps({
            "checkpoint": str(args.checkpoint),
            "untrained": untrained,
            "mode": mode,
            "decoding": {key: choice._asdict() for key, choice in decoding.items()},
            "validated": validating,
            "shown": shown,
            "candidates": [
                {"text": g.text, "code": code, "token_ids": g.token_ids, "step_map": g.step_map,
                 "finish_reason": g.finish_reason, "stats": asdict(g.stats),
                 "verdict": None if verdict is None else json.loads(verdict.to_json())}
                for g, code, verdict in zip(generations, codes, verdicts)
            ],
        }, indent=2))
    else:
        for index, (generation, code, verdict) in enumerate(zip(generations, codes, verdicts)):
            print(_stats_line(index, generation), file=sys.stderr)
            if mode != "raw" and code is None:
                what = "no code block" if mode == "e2e" else "the skeleton's prefix and suffix were not found"
                print(f"[candidate {index}] {what} in the output" + ("" if validating else "; printing the raw output"),
                      file=sys.stderr)
            elif verdict is not None:
                print(f"[candidate {index}] {verdict.summary()}", file=sys.stderr)
            if not validating:
                if len(generations) > 1:
                    print(f"# ----- candidate {index} -----")
                print(generation.text if code is None else code)
        if validating:
            _report_validated(codes, verdicts, shown, args.policy)
        if decoding["max_new_tokens"].source == "default" and on_cpu:
            print(f"note: at most {max_new_tokens} new tokens, the CPU default ({GPU_DEFAULT_MAX_NEW_TOKENS} on a "
                  f"GPU); pass --max-new-tokens N for longer output", file=sys.stderr)
    if untrained:
        print(UNTRAINED_WARNING, file=sys.stderr)
    return exit_code(verdicts, shown) if validating else 0


def choose_generate_decoding(args, checkpoint_defaults: dict, on_cpu: bool) -> dict[str, DecodingChoice]:
    """The engine.generate settings (and `num_return_sequences`, the candidate count): the flags, else the
    checkpoint's generation_config.json, else the built-in. One candidate is greedy unless --temperature says
    otherwise: a checkpoint's temperature is the one its several candidates are sampled at."""
    given = {"num_return_sequences": args.n, "strategy": args.strategy, "threshold": args.threshold,
             "max_new_tokens": args.max_new_tokens, "top_k": args.top_k, "top_p": args.top_p}
    built_in = {"num_return_sequences": 1, "strategy": DEFAULT_STRATEGY, "threshold": DEFAULT_THRESHOLD,
                "max_new_tokens": CPU_DEFAULT_MAX_NEW_TOKENS if on_cpu else GPU_DEFAULT_MAX_NEW_TOKENS,
                "top_k": 0, "top_p": 1.0, "steps_per_block": None}
    chosen = choose_decoding(given, checkpoint_defaults, built_in)
    several = chosen["num_return_sequences"].value > 1
    chosen |= choose_decoding({"temperature": args.temperature}, checkpoint_defaults if several else {},
                              {"temperature": DEFAULT_SAMPLING_TEMPERATURE if several else 0.0})
    return chosen


def validate_candidates(codes: list[str | None], problem, args) -> list:
    """Each candidate module's Verdict against the reference `problem` (None where no code came out), as
    `dice-copilot validate` judges it; all compiled at once, run one by one on the GPU."""
    from dice_copilot.validator import Candidate, FailureCode, InputError, ValidatorPool, Verdict

    candidate_path = args.file if args.mode == "infill" else None  # a .cu skeleton makes a .cu candidate
    verdicts, items, where = [None] * len(codes), [], []
    for index, code in enumerate(codes):
        if code is None:
            continue
        try:
            items.append((problem, Candidate.from_source(code, path=candidate_path)))
            where.append(index)
        except InputError as err:  # e.g. the code does not parse: rejected as the validator rejects such a file
            verdicts[index] = Verdict(failure=str(err), failure_code=FailureCode.BAD_INPUT)
    if items:
        with ValidatorPool(warm=False) as pool:
            for index, verdict in zip(where, pool.validate_many(items, policy=args.policy)):
                verdicts[index] = verdict
    return verdicts


def best_candidate(verdicts: list) -> int | None:
    """The index of the candidate to show: among those that passed, the fastest measured one, else the first."""
    passed = [i for i, v in enumerate(verdicts) if v is not None and v.passed]
    if not passed:
        return None
    return max(passed, key=lambda i: (not verdicts[i].compile_only, verdicts[i].speedup or 0.0, -i))


def exit_code(verdicts: list, shown: int | None) -> int:
    """0 when a candidate passed; 3 when none did and this machine could not check one (it might pass where it can
    be checked); 1 otherwise."""
    from dice_copilot.validator import Outcome

    if shown is not None:
        return 0
    if any(v is not None and v.outcome is Outcome.NOT_CHECKED for v in verdicts):
        return EXIT_NOT_CHECKED
    return EXIT_FAILED


def _report_validated(codes: list, verdicts: list, shown: int | None, policy: str) -> None:
    """The best passing candidate on stdout; on stderr, which one it is and what its verdict covers."""
    if shown is None:
        fixes = {v.details["environment"]["fix_cli"] for v in verdicts
                 if v is not None and v.details.get("environment", {}).get("fix_cli")}
        print(f"no candidate passed validation ({policy} policy), so nothing is printed; --no-validate prints the "
              f"model's output unchecked", file=sys.stderr)
        for fix in sorted(fixes):
            print(f"  fix: {fix}", file=sys.stderr)
        return
    verdict = verdicts[shown]
    passed = sum(1 for v in verdicts if v is not None and v.passed)
    which = f"candidate {shown}" + (f", the best of {passed} that passed" if passed > 1 else "")
    what = ("compile-checked only: no CUDA device here, so neither correctness nor speed was checked"
            if verdict.compile_only else "validated on the GPU")
    print(f"printing {which} ({what})", file=sys.stderr)
    print(codes[shown])


def build_prompt(args) -> tuple:
    """(mode, prompt text, (prefix, suffix) for infill, the PyTorch reference the answer is validated against: a
    validator Problem, None in raw mode) from the command-line arguments; UsageError when the input cannot make a
    prompt the mode needs."""
    mode = args.mode or ("e2e" if args.module else "raw")
    if args.module and mode != "e2e":
        raise UsageError("--module always builds the end-to-end prompt; use --file with --mode raw or infill")
    if args.prompt is not None:
        text, path = args.prompt, None
    else:
        path = args.module or args.file
        text = _read_text(path, "module" if args.module else "file")
    if not text.strip():
        raise UsageError("the prompt is empty")
    if mode == "raw":
        return mode, text, None, None
    if mode == "e2e":
        return mode, end_to_end_prompt(text), None, _checked_reference(text, path)
    if args.reference is None:
        raise UsageError("--mode infill needs --reference FILE.py, the PyTorch module the skeleton implements")
    if text.count(args.fill_marker) != 1:
        raise UsageError(
            f"--mode infill needs exactly one {args.fill_marker} marker in the skeleton where the code goes "
            f"(found {text.count(args.fill_marker)})"
        )
    reference = _checked_reference(_read_text(args.reference, "reference module"), args.reference)
    prefix, suffix = text.split(args.fill_marker)
    return mode, infill_prompt(reference.source, prefix, suffix), (prefix, suffix), reference


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {what} {path}: {err}")


def _checked_reference(source: str, path: Path | None):
    """The PyTorch module as a validator Problem: it must be one `dice-copilot validate` would accept as a
    reference, or what comes back cannot be checked against it."""
    from dice_copilot.validator.problem import InputError, Problem

    try:
        return Problem.from_source(source, path=path)
    except InputError as err:
        raise UsageError(str(err)) from None


def result_code(mode: str, text: str, skeleton: tuple[str, str] | None) -> str | None:
    """What the mode is after: the ModelNew code (e2e), the spliced middle (infill); None for raw or failure."""
    if mode == "e2e":
        return extract_first_code(text)
    if mode == "infill":
        return splice_infill(skeleton[0], skeleton[1], text)
    return None


@contextlib.contextmanager
def _decoding_threads(model, on_cpu: bool):
    """One intra-op thread while a small model decodes on the CPU, unless OMP_NUM_THREADS says how many."""
    import torch

    threads = torch.get_num_threads()
    small = sum(p.numel() for p in model.parameters()) <= ONE_THREAD_MAX_PARAMETERS
    if on_cpu and small and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _decoding_display(args, most_tokens: int):
    """What stderr shows while decoding: the text with --stream, a progress line on a terminal, else nothing."""
    if args.json or args.quiet:
        return None
    if args.stream:
        return _BlockStreamer(sys.stderr)
    if sys.stderr.isatty():
        return _ProgressLine(sys.stderr, most_tokens)
    return None


class _BlockStreamer:
    """Writes the text each committed block adds to candidate 0, as it arrives."""

    def __init__(self, stream):
        self.stream = stream
        self.shown = ""

    def __call__(self, update) -> None:
        if update.index != 0 or not update.text.startswith(self.shown):
            return  # a partial UTF-8 character decoded differently last time: wait until it settles
        self.stream.write(update.text[len(self.shown):])
        self.stream.flush()
        self.shown = update.text

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class _ProgressLine:
    """One line, rewritten in place, counting the tokens committed so far; erased when decoding ends."""

    REFRESH_S = 0.1

    def __init__(self, stream, most_tokens: int):
        self.stream = stream
        self.most_tokens = most_tokens
        self.tokens = {}  # candidate index -> tokens committed
        self.start = self.last_shown = time.perf_counter()
        self.width = 0

    def __call__(self, update) -> None:
        self.tokens[update.index] = len(update.token_ids)
        now = time.perf_counter()
        if now - self.last_shown < self.REFRESH_S:
            return
        self.last_shown = now
        done = sum(self.tokens.values())
        self._write(f"decoding: {done}/{self.most_tokens} tokens, {done / (now - self.start):.0f} tok/s")

    def close(self) -> None:
        self._write("")

    def _write(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self.width) + ("\r" if not line else ""))
        self.stream.flush()
        self.width = len(line)


def _stats_line(index: int, generation) -> str:
    s = generation.stats
    rate = s.generated_tokens / s.wall_time_s if s.wall_time_s > 0 else 0.0
    return (
        f"[candidate {index}] {s.generated_tokens} tokens in {s.forward_passes} forward passes "
        f"({s.tokens_per_forward:.2f} tokens/forward), {s.wall_time_s:.2f} s, {rate:.1f} tok/s, "
        f"prompt {s.prompt_tokens} tokens, finish: {generation.finish_reason}"
    )
