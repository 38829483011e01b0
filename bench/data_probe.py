"""Issue 31's proof of the data: the same short training probe on CuKe v1 (the seed library before its rewrite) and
on CuKe v2 (the rewritten library), scored side by side on v2's held-out split and the hand-written user-style set.

Both arms train one model of the dice-tiny recipe's shape from scratch (no pretraining), with the embedded default
checkpoint's tokenizer, the recipe's SFT settings (trainer/recipes/dice-tiny/sft.toml), the same seed and the same
number of steps, on their set's end-to-end and infill pairs (the recipe's data entries: made when missing, checked
against their pins). bench/model_eval.py then scores both with the same greedy decoding and the strict validator:
compile rate, exec@1, fast_1. v2's held-out families are in neither arm's training set.

One arm per 10-minute GPU command (the work folder in /tmp survives between commands on a warm machine):
    python bench/data_probe.py train v1 --steps 500 --work /tmp/probe
    python bench/data_probe.py train v2 --steps 500 --work /tmp/probe
    python bench/data_probe.py eval --work /tmp/probe --limit 64 --out $OUT/data_probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "trainer" / "recipes" / "dice-tiny"
# Each arm: the recipe stage whose training data it reads.
ARMS = {"v1": "sft", "v2": "sft-v2"}
SEED = 11  # one seed for both arms: the same initial weights and noise
DATA = REPO / "runs" / "dice-tiny" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train one arm")
    train.add_argument("arm", choices=sorted(ARMS))
    train.add_argument("--steps", type=int, default=500)
    train.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this long")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override an SFT setting of both arms alike (e.g. seq_len=2048)")
    scoring = commands.add_parser("eval", help="score both arms side by side (bench/model_eval.py)")
    scoring.add_argument("--limit", type=int, default=64, help="problems of each held-out set")
    scoring.add_argument("--out", type=Path, required=True)
    for command in (train, scoring):
        command.add_argument("--work", type=Path, default=Path("/tmp/probe"))
        command.add_argument("--data", type=Path, default=DATA, help="the recipe's data folder")
    args = parser.parse_args(argv)
    return train_arm(args) if args.command == "train" else score_arms(args)


def train_arm(args) -> int:
    from dice_copilot.model.checkpoint import DEFAULT_CHECKPOINT_DIR
    from dice_copilot.trainer.recipe import RecipeError, RecipeRunner, load_recipe, make_missing_data
    from dice_copilot.trainer.sft import SFTError, parse_overrides, train_sft
    from dice_copilot.trainer.sft_config import SFTConfig, SFTConfigError
    from dice_copilot.trainer.sft_data import SFTDataError

    recipe = load_recipe(RECIPE, [])
    stage = recipe.stage(ARMS[args.arm])
    try:
        make_missing_data(recipe, args.data, [stage])
        RecipeRunner(recipe, args.work, args.data).check_data(stage)  # there, and the files the recipe pins
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    files = [str(args.data / recipe.data[name].path) for name in stage.train]
    values = {**recipe.stage("sft").values, **recipe.from_scratch_fields(DEFAULT_CHECKPOINT_DIR),
              "train_files": files, "output_dir": str(args.work / args.arm), "max_steps": args.steps, "seed": SEED,
              "max_minutes": args.max_minutes, "max_shard_bytes": recipe.max_file_bytes}
    try:
        values.update(parse_overrides(args.set))
        result = train_sft(SFTConfig.from_dict(values, source="bench/data_probe.py"))
    except (SFTConfigError, SFTDataError, SFTError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = {"arm": args.arm, "stage_data": stage.train, "steps": result.steps, "final_loss": result.final_loss,
               "tokens_trained": sum(result.tokens_per_step), "checkpoint": str(result.checkpoint_dir)}
    (args.work / args.arm / "probe.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


def score_arms(args) -> int:
    import importlib.util

    from dice_copilot.trainer.recipe import load_recipe

    arms = {arm: json.loads((args.work / arm / "probe.json").read_text()) for arm in ARMS
            if (args.work / arm / "probe.json").is_file()}
    if len(arms) < len(ARMS):
        print(f"error: train both arms first (found {sorted(arms) or 'none'} in {args.work})", file=sys.stderr)
        return 2
    if len({arm["steps"] for arm in arms.values()}) != 1:
        print(f"warning: the arms trained different numbers of steps: {[a['steps'] for a in arms.values()]}",
              file=sys.stderr)
    spec = importlib.util.spec_from_file_location("model_eval", REPO / "bench" / "model_eval.py")
    model_eval = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = model_eval  # its dataclasses look their module up
    spec.loader.exec_module(model_eval)
    heldout = args.data / load_recipe(RECIPE, []).data["cuke_heldout"].path
    report = args.work / "model_eval.json"
    code = model_eval.main(["--checkpoint", arms["v2"]["checkpoint"], "--baseline", arms["v1"]["checkpoint"],
                            "--cuke-heldout", str(heldout), "--user-problems", str(REPO / "bench" / "heldout_user_style"),
                            "--limit", str(args.limit), "--candidates", "0", "--no-infill", "--out", str(report)])
    if code != 0:
        return code
    result = {"arms": arms, "model_eval": json.loads(report.read_text()),
              "note": "ours = the v2 arm, baseline = the v1 arm; same shape, tokenizer, settings, seed and steps"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
