"""`dice-copilot generate`: run a checkpoint by hand on a raw prompt, a PyTorch module (DICE end-to-end), or an
infill skeleton, streaming committed blocks to stderr and printing the code (or the raw answer) to stdout."""

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .prompts import end_to_end_prompt, extract_first_code, infill_prompt, splice_infill

MODES = ("raw", "e2e", "infill")
DEFAULT_FILL_MARKER = "<FILL>"


class UsageError(ValueError):
    """Bad command-line input; the message says what to change."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="generate with a DICE checkpoint from a prompt, a file or a PyTorch module",
        description=(
            "Generate with a DICE block-diffusion checkpoint. --module FILE.py builds DICE's end-to-end prompt "
            "from a PyTorch Model and prints the ModelNew code; --mode infill fills the "
            f"{DEFAULT_FILL_MARKER} marker of a kernel skeleton; --mode raw sends the text as is."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", metavar="TEXT", help="the prompt text (raw), PyTorch code (e2e) or skeleton (infill)")
    source.add_argument("--file", type=Path, metavar="FILE", help="read that text from a file")
    source.add_argument("--module", type=Path, metavar="FILE.py",
                        help="a PyTorch module with class Model: DICE end-to-end prompt, prints ModelNew code")
    parser.add_argument("--checkpoint", default="default", metavar="PATH",
                        help="checkpoint folder (default: the embedded default checkpoint, which is UNTRAINED)")
    parser.add_argument("--mode", choices=MODES,
                        help="how to build the prompt: raw text, DICE end-to-end, or DICE infilling "
                             "(default: e2e with --module, raw otherwise)")
    parser.add_argument("--reference", type=Path, metavar="FILE.py",
                        help="infill mode: the PyTorch reference module the skeleton implements")
    parser.add_argument("--fill-marker", default=DEFAULT_FILL_MARKER, metavar="TEXT",
                        help=f"infill mode: where the code goes in the skeleton (default {DEFAULT_FILL_MARKER})")
    parser.add_argument("-n", type=int, default=1, metavar="N", help="candidates to generate (default 1)")
    parser.add_argument("--strategy", choices=("dynamic", "static", "sequential"), default="dynamic",
                        help="which masked tokens to commit per denoising pass (default dynamic)")
    parser.add_argument("--threshold", type=float, default=0.9,
                        help="dynamic strategy: commit every token whose confidence exceeds this (default 0.9)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, metavar="N", help="default 1024")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = off (default)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help="1.0 = off (default)")
    parser.add_argument("--seed", type=int, help="sampling seed (for temperature > 0)")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                        help="weight dtype (default: the checkpoint's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with every candidate and stats")
    parser.add_argument("--quiet", action="store_true", help="do not stream blocks to stderr")
    parser.set_defaults(run=run_generate)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {what} {path}: {err}")


def build_prompt(args) -> tuple[str, str, tuple[str, str] | None]:
    """(mode, prompt text, (prefix, suffix) for infill) from the command-line arguments."""
    mode = args.mode or ("e2e" if args.module else "raw")
    if args.module and mode != "e2e":
        raise UsageError("--module always builds the end-to-end prompt; use --file with --mode raw or infill")
    if args.prompt is not None:
        text = args.prompt
    else:
        path = args.module or args.file
        text = _read_text(path, "module" if args.module else "file")
    if not text.strip():
        raise UsageError("the prompt is empty")
    if mode == "raw":
        return mode, text, None
    if mode == "e2e":
        return mode, end_to_end_prompt(text), None
    if args.reference is None:
        raise UsageError("--mode infill needs --reference FILE.py, the PyTorch module the skeleton implements")
    if text.count(args.fill_marker) != 1:
        raise UsageError(
            f"--mode infill needs exactly one {args.fill_marker} marker in the skeleton where the code goes "
            f"(found {text.count(args.fill_marker)})"
        )
    prefix, suffix = text.split(args.fill_marker)
    return mode, infill_prompt(_read_text(args.reference, "reference module"), prefix, suffix), (prefix, suffix)


def result_code(mode: str, text: str, skeleton: tuple[str, str] | None) -> str | None:
    """What the mode is after: the ModelNew code (e2e), the spliced middle (infill); None for raw or failure."""
    if mode == "e2e":
        return extract_first_code(text)
    if mode == "infill":
        return splice_infill(skeleton[0], skeleton[1], text)
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


def _stats_line(index: int, generation) -> str:
    s = generation.stats
    rate = s.generated_tokens / s.wall_time_s if s.wall_time_s > 0 else 0.0
    return (
        f"[candidate {index}] {s.generated_tokens} tokens in {s.forward_passes} forward passes "
        f"({s.tokens_per_forward:.2f} tokens/forward), {s.wall_time_s:.2f} s, {rate:.1f} tok/s, "
        f"prompt {s.prompt_tokens} tokens, finish: {generation.finish_reason}"
    )


def run_generate(args) -> int:
    import torch

    from .checkpoint import UNTRAINED_WARNING, CheckpointError, load
    from .engine import BlockDiffusionEngine

    try:
        if args.n < 1 or args.max_new_tokens < 1:
            raise UsageError("-n and --max-new-tokens must be at least 1")
        mode, prompt, skeleton = build_prompt(args)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, tokenizer = load(args.checkpoint, device=device, dtype=args.dtype)
    except (UsageError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    untrained = bool(model.config.untrained)
    if untrained:
        print(UNTRAINED_WARNING, file=sys.stderr)

    engine = BlockDiffusionEngine(model, tokenizer, device=device)
    streamer = None if args.quiet or args.json else _BlockStreamer(sys.stderr)
    try:
        generations = engine.generate(
            [prompt], n=args.n, strategy=args.strategy, threshold=args.threshold,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            seed=args.seed, on_block=streamer,
        )
    except ValueError as err:  # e.g. prompt + max_new_tokens longer than the model's positions
        print(f"error: {err}", file=sys.stderr)
        return 2
    if streamer is not None:
        sys.stderr.write("\n")

    codes = [result_code(mode, g.text, skeleton) for g in generations]
    if args.json:
        print(json.dumps({
            "checkpoint": str(args.checkpoint),
            "untrained": untrained,
            "mode": mode,
            "candidates": [
                {"text": g.text, "code": code, "token_ids": g.token_ids, "step_map": g.step_map,
                 "finish_reason": g.finish_reason, "stats": asdict(g.stats)}
                for g, code in zip(generations, codes)
            ],
        }, indent=2))
        return 0

    for index, (generation, code) in enumerate(zip(generations, codes)):
        print(_stats_line(index, generation), file=sys.stderr)
        if len(generations) > 1:
            print(f"# ----- candidate {index} -----")
        if mode != "raw" and code is None:
            what = "no code block" if mode == "e2e" else "the skeleton's prefix and suffix were not found"
            print(f"[candidate {index}] {what} in the output; printing the raw output", file=sys.stderr)
        print(generation.text if code is None else code)
    if untrained:
        print(UNTRAINED_WARNING, file=sys.stderr)
    return 0
