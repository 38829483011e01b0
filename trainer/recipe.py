"""`dice-copilot train recipe RECIPE_DIR --work WORK`: every stage of a checkpoint's pipeline, in order, from one folder.

A recipe folder holds `recipe.toml` (the model shape, the data files by path and sha256, the stages in order: what
each reads and which stage it starts from) and one config per stage (a tokenizer's settings, or SFTConfig / RLConfig
fields). The runner wires the stages together — a stage's `model`, `tokenizer`, data files and `output_dir` come
from the recipe, never from its config — and keeps a log in the recipe folder, meant to be committed:
`progress.json` (per stage: status, steps done of planned, data rows consumed, minutes, held-out scores, the
checkpoint's sha256) and `PROGRESS.md`, the same as tables.

Each stage writes WORK/STAGE/: `checkpoint/` (a tokenizer folder, or the HF checkpoint with its
training_position.json), `state/` (exact resume), `stage.json` (what it was started from) and, once it finished,
`done.json` (the checkpoint's sha256). A run of the recipe:
1. skips a stage that finished (took its planned steps): its checkpoint matches done.json or the log's record, or
   — a fresh machine that got only a later stage's checkpoint back — the log says it finished;
2. checks the sha256 of every data file the stages still to run read, before the first one starts (a missing,
   changed or unpinned file is an error, exit 2);
3. starts the stage from its newest `state/` when there is one (exact), else — a fresh machine that got only the
   weights back — from its checkpoint's weights at the steps and data rows training_position.json records, with a
   fresh optimizer and `resume_warmup_steps` of warmup, else from the start;
4. with `--max-minutes`, stops a stage after the step that crosses the time limit, saving what a later run continues
   from (exit 4: run the same command again).

A stage is made from its inputs — the data files' sha256, the checkpoint it starts from, the model shape — and
refuses to continue or be skipped when they changed since it was made (`--restart STAGE` makes it again).

`--ship [DEST]` runs no stage: it makes the last finished stage's checkpoint the shipped one, with its model card, when
it beats the one at DEST on the held-out scores (trainer/recipe_ship.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RECIPE_FILE = "recipe.toml"
PROGRESS_JSON = "progress.json"
PROGRESS_MD = "PROGRESS.md"
STAGE_FILE = "stage.json"
DONE_FILE = "done.json"
CHECKPOINT = "checkpoint"
KINDS = ("tokenizer", "sft", "rl")
# Fields of a training stage's config that the recipe sets (a stage config that sets one is an error).
WIRED_FIELDS = ("model", "tokenizer", "model_overrides", "block_size", "train_files", "eval_files", "task_files",
                "output_dir", "init_weights", "start_step", "data_offset_rows", "max_shard_bytes", "max_minutes")
SAVE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
EXIT_OK, EXIT_BAD_INPUT, EXIT_OUT_OF_TIME = 0, 2, 4
# A stage is not started with less time than this left of --max-minutes (loading and the first save alone take it).
MIN_STAGE_MINUTES = 1.0


class RecipeError(ValueError):
    """A recipe that cannot run as asked (bad file, missing or changed data, a stage made from other inputs); the
    message says what to do."""


# --- command line -------------------------------------------------------------------------------------------------


def register_train(train_subparsers) -> None:
    """Add `train recipe` to the `dice-copilot train` group (its parser imports nothing heavy)."""
    parser = train_subparsers.add_parser(
        "recipe", help="run a recipe's stages in order (tokenizer, pretraining, SFT, RL), resumable",
        description="Run the stages of RECIPE_DIR/recipe.toml in order into WORK, skipping finished ones and resuming "
                    "interrupted ones (from their state, else from their checkpoint's weights). Data files are checked "
                    "against their sha256 first. The log (progress.json, PROGRESS.md) is written into RECIPE_DIR. "
                    "Exit codes: 0 the stages asked for are done, 2 bad input or data, 4 --max-minutes ran out first "
                    "(run the same command again to continue).")
    parser.add_argument("recipe", metavar="RECIPE_DIR", type=Path, help=f"folder holding {RECIPE_FILE}")
    parser.add_argument("--work", required=True, type=Path, metavar="WORK",
                        help="folder of the stages' outputs (WORK/STAGE/checkpoint, state/, ...)")
    parser.add_argument("--data", type=Path, metavar="DIR",
                        help="folder the recipe's data paths are relative to (default: WORK/data)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--until", metavar="STAGE", help="run the stages up to and including STAGE")
    which.add_argument("--only", metavar="STAGE", help="run STAGE alone (the stages before it must be done)")
    parser.add_argument("--set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                        help="override a stage config field (repeatable), e.g. --set pretrain.max_steps=2000; "
                             "--set shape=NAME picks another of the recipe's shapes")
    parser.add_argument("--restart", action="append", default=[], metavar="STAGE",
                        help="delete WORK/STAGE and make the stage again (repeatable)")
    parser.add_argument("--max-minutes", type=float, metavar="M",
                        help="stop after the training step that ends M minutes after the start, saving it; no "
                             "stage starts with less than a minute left (exit 4)")
    parser.add_argument("--make-data", action="store_true",
                        help="first run the recipe's `made_by` command of every data file that the stages run "
                             "(--until, --only) read and that is missing (from the repository root)")
    parser.add_argument("--pin-data", action="store_true",
                        help="write the sha256 of every data file whose recipe entry has none into recipe.toml, "
                             "then stop (pinned entries are checked, never changed)")
    parser.add_argument("--ship", nargs="?", const="default", metavar="DEST",
                        help="run no stage: write the checkpoint of the last finished stage (with its model card) to "
                             "DEST (default: the embedded default checkpoint, model/default_checkpoint), if it beats "
                             "the one there on the held-out scores")
    parser.add_argument("--stage", metavar="STAGE",
                        help="with --ship: ship this stage's checkpoint instead of the last finished stage's")
    parser.add_argument("--force", action="store_true",
                        help="with --ship: replace DEST's checkpoint even when the new one does not beat it (a "
                             "folder that is not a checkpoint is never replaced)")
    parser.set_defaults(run=run_recipe_command)


def run_recipe_command(args) -> int:
    """`dice-copilot train recipe` (see the module docstring)."""
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise RecipeError("run the recipe as one process, without accelerate launch or torchrun: it trains each "
                              "stage on this machine's first GPU")
        if args.max_minutes is not None and args.max_minutes <= 0:
            raise RecipeError(f"--max-minutes must be > 0, not {args.max_minutes}")
        recipe = load_recipe(args.recipe, args.set)
        data_root = (args.data or args.work / "data").absolute()
        if args.ship is not None:
            return _ship(args, recipe, data_root)
        if args.stage is not None or args.force:
            raise RecipeError("--stage and --force go with --ship")
        if args.make_data:
            make_missing_data(recipe, data_root, recipe.selected(args.until, args.only))
        if args.pin_data:
            pinned = pin_data(recipe, data_root)
            print(f"recipe: pinned {len(pinned)} data file(s): {', '.join(pinned) or 'none needed it'}")
            return EXIT_OK
        runner = RecipeRunner(recipe, args.work.absolute(), data_root, args.max_minutes)
        with _sigterm_interrupts():
            return runner.run(recipe.selected(args.until, args.only), restart=args.restart)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _ship(args, recipe: Recipe, data_root: Path) -> int:
    running = [flag for flag, given in (("--until", args.until), ("--only", args.only), ("--restart", args.restart),
                                        ("--max-minutes", args.max_minutes is not None),
                                        ("--make-data", args.make_data), ("--pin-data", args.pin_data)) if given]
    if running:
        raise RecipeError(f"--ship runs no stage, so it takes no {', '.join(running)}: run the stages first, then "
                          f"ship (--stage STAGE picks the stage to ship)")
    from .recipe_ship import ship

    ship(recipe, args.work.absolute(), data_root, args.ship, stage=args.stage, force=args.force)
    return EXIT_OK


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (a command's time limit, `kill`) interrupts like Ctrl-C, so the log says how far the stage got."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the recipe file ------------------------------------------------------------------------------------------------


@dataclass
class DataFile:
    """One data file a stage reads: where it lies under the data folder, its sha256 ("" until pinned), the manifest
    that names its origin (a corpus's manifest.jsonl) with its own sha256, the command that makes it, and what it
    holds in a sentence (for the model card)."""

    name: str
    path: str
    sha256: str = ""
    manifest: str | None = None
    manifest_sha256: str = ""
    made_by: str = ""
    about: str = ""

    def files(self) -> list[tuple[str, str, str]]:
        """(recipe key, relative path, pinned sha256) of the file and of its manifest."""
        pairs = [("sha256", self.path, self.sha256)]
        if self.manifest:
            pairs.append(("manifest_sha256", self.manifest, self.manifest_sha256))
        return pairs


@dataclass
class TokenizerSettings:
    """A tokenizer stage's config: the vocabulary size comes from the recipe's shape."""

    # Merge only pairs seen at least this often.
    min_frequency: int = 2
    # At most about this many characters of each file (evenly spread over it); None: all of them. (BPE training has
    # no randomness: the same text gives the same tokenizer.)
    max_chars_per_file: int | None = None

    def __post_init__(self):
        if self.min_frequency < 1 or (self.max_chars_per_file is not None and self.max_chars_per_file < 1):
            raise RecipeError(f"tokenizer config: min_frequency must be >= 1 and max_chars_per_file >= 1 or unset, "
                              f"got {self.min_frequency}, {self.max_chars_per_file}")


@dataclass
class StageSpec:
    """One stage of the recipe: its kind, config, data and the stage whose checkpoint it starts from."""

    name: str
    kind: str
    config_file: Path
    # The stage it starts from (a tokenizer stage: a model trained from scratch on the recipe's shape), or None.
    source: str | None
    train: list[str]
    eval: list[str]
    # The config's fields from its file and --set (the recipe's wiring comes on top when the stage runs).
    values: dict[str, Any]

    @property
    def data_names(self) -> list[str]:
        return self.train + [name for name in self.eval if name not in self.train]


@dataclass
class Recipe:
    folder: Path
    name: str
    # The shape trained: a key of `shapes`, each a set of DiceConfig fields over the `preset`.
    shape: str
    shapes: dict[str, dict[str, Any]]
    preset: str
    max_checkpoint_bytes: int
    max_file_bytes: int
    data: dict[str, DataFile]
    stages: list[StageSpec]

    def stage(self, name: str) -> StageSpec:
        for spec in self.stages:
            if spec.name == name:
                return spec
        raise RecipeError(f"no stage {name!r} in {self.folder / RECIPE_FILE}; stages: "
                          f"{', '.join(s.name for s in self.stages)}")

    def selected(self, until: str | None, only: str | None) -> list[StageSpec]:
        names = [s.name for s in self.stages]
        if only is not None:
            return [self.stage(only)]
        if until is not None:
            return self.stages[: names.index(self.stage(until).name) + 1]
        return list(self.stages)

    @property
    def shape_fields(self) -> dict[str, Any]:
        return self.shapes[self.shape]

    def from_scratch_fields(self, tokenizer: Path) -> dict[str, Any]:
        """The training-config fields of a model of the recipe's shape trained from scratch with `tokenizer` (its
        vocabulary is the tokenizer's)."""
        shape = dict(self.shape_fields)
        return {"model": self.preset, "tokenizer": str(tokenizer), "block_size": shape.pop("block_size", None),
                "model_overrides": {k: v for k, v in shape.items() if k != "vocab_size"}}

    def model_config(self, shape: str | None = None):
        """The DiceConfig of a shape (the chosen one by default), at the vocabulary size the shape names."""
        from dice_copilot.model.config import DiceConfig

        values = self.shapes[shape or self.shape]
        return DiceConfig.from_name(self.preset, **{**values, "mask_token_id": values["vocab_size"] - 1})

    def planned_steps(self, spec: StageSpec) -> int:
        """The steps a stage takes in all (a tokenizer stage: 1)."""
        if spec.kind == "tokenizer":
            return 1
        config = stage_config(self, spec, Path("/work"), Path("/data"), {})
        return config.max_steps if spec.kind == "sft" else config.rl_steps

    def export_bytes(self, shape: str | None = None) -> tuple[int, int]:
        """(checkpoint bytes, largest tensor's bytes) of a shape in the last training stage's save dtype."""
        config = self.model_config(shape)
        last = [s for s in self.stages if s.kind != "tokenizer"][-1]
        width = SAVE_DTYPE_BYTES[last.values.get("save_dtype", "bfloat16")]
        largest = max(config.vocab_size * config.hidden_size, config.intermediate_size * config.hidden_size)
        return config.num_parameters * width, largest * width


def load_recipe(folder: Path, overrides: list[str] = ()) -> Recipe:
    """The recipe in `folder` with `--set` overrides applied; every stage's config is checked here, before any stage
    runs."""
    folder = Path(folder).absolute()
    raw = _read_toml(folder / RECIPE_FILE)
    recipe_overrides, stage_overrides = _split_overrides(overrides)
    raw.update(recipe_overrides)
    try:
        data = {name: DataFile(name=name, **entry) for name, entry in raw.get("data", {}).items()}
    except TypeError as err:
        raise RecipeError(f"{folder / RECIPE_FILE}: a [data.NAME] table takes path, sha256, manifest, "
                          f"manifest_sha256, made_by and about: {err}") from None
    stages = [_stage_spec(folder, entry, data, stage_overrides) for entry in raw.get("stages", [])]
    if not stages:
        raise RecipeError(f"{folder / RECIPE_FILE} lists no [[stages]]")
    unknown = sorted(set(stage_overrides) - {s.name for s in stages})
    if unknown:
        raise RecipeError(f"--set names unknown stage(s) {unknown}; stages: {', '.join(s.name for s in stages)}")
    try:
        recipe = Recipe(folder=folder, name=raw["name"], shape=raw["shape"], shapes=raw["shapes"],
                        preset=raw.get("preset", "small"), max_checkpoint_bytes=int(raw["max_checkpoint_bytes"]),
                        max_file_bytes=int(raw["max_file_bytes"]), data=data, stages=stages)
    except KeyError as err:
        raise RecipeError(f"{folder / RECIPE_FILE} needs a top-level {err.args[0]!r}") from None
    _check_wiring(recipe)
    _check_shape(recipe)
    for spec in recipe.stages:  # every config error now, not after hours of training
        stage_config(recipe, spec, Path("/work"), Path("/data"), {})
    return recipe


def _read_toml(path: Path) -> dict:
    if not path.is_file():
        raise RecipeError(f"{path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise RecipeError(f"cannot parse {path} as TOML: {err}") from None


def _split_overrides(items: list[str]) -> tuple[dict, dict[str, dict]]:
    """--set items: `shape=NAME` for the recipe, `STAGE.KEY=VALUE` (VALUE read as TOML, else a string) for a stage."""
    recipe, stages = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise RecipeError(f"--set expects STAGE.KEY=VALUE or shape=NAME, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        stage, dot, name = key.partition(".")
        if not dot:
            if key != "shape":
                raise RecipeError(f"--set {item!r}: the only recipe-level key is `shape`; stage keys are STAGE.KEY")
            recipe[key] = value
        else:
            stages.setdefault(stage, {})[name] = value
    return recipe, stages


def _stage_spec(folder: Path, entry: dict, data: dict[str, DataFile], overrides: dict[str, dict]) -> StageSpec:
    where = f"{folder / RECIPE_FILE} stage {entry.get('name', '?')!r}"
    known = {"name", "kind", "config", "from", "train", "eval"}
    if set(entry) - known or not {"name", "kind", "config"} <= set(entry):
        raise RecipeError(f"{where}: a [[stages]] entry has name, kind, config and optionally from, train, eval; "
                          f"it has {sorted(entry)}")
    if entry["kind"] not in KINDS:
        raise RecipeError(f"{where}: kind must be one of {KINDS}, not {entry['kind']!r}")
    for name in entry.get("train", []) + entry.get("eval", []):
        if name not in data:
            raise RecipeError(f"{where} reads {name!r}, which has no [data.{name}] table")
    config_file = folder / entry["config"]
    values = _read_toml(config_file)
    wired = sorted(set(values) & set(WIRED_FIELDS))
    if wired and entry["kind"] != "tokenizer":
        raise RecipeError(f"{config_file} sets {wired}, which the recipe wires (from, train, eval and the shape in "
                          f"{RECIPE_FILE}); remove them")
    values.update(overrides.get(entry["name"], {}))
    return StageSpec(name=entry["name"], kind=entry["kind"], config_file=config_file, source=entry.get("from"),
                     train=list(entry.get("train", [])), eval=list(entry.get("eval", [])), values=values)


def _check_wiring(recipe: Recipe) -> None:
    seen: dict[str, str] = {}
    for spec in recipe.stages:
        if spec.name in seen:
            raise RecipeError(f"stage name {spec.name!r} appears twice in {recipe.folder / RECIPE_FILE}")
        if spec.kind == "tokenizer":
            if spec.source is not None or not spec.train:
                raise RecipeError(f"tokenizer stage {spec.name!r} starts from nothing and needs `train` data")
        elif spec.source not in seen:
            raise RecipeError(f"stage {spec.name!r} starts from {spec.source!r}, which is not an earlier stage")
        elif spec.kind == "rl" and seen[spec.source] == "tokenizer":
            raise RecipeError(f"RL stage {spec.name!r} must start from a trained checkpoint, not a tokenizer")
        if spec.kind != "tokenizer" and not spec.train:
            raise RecipeError(f"stage {spec.name!r} needs `train` data")
        seen[spec.name] = spec.kind


def _check_shape(recipe: Recipe) -> None:
    if recipe.shape not in recipe.shapes:
        raise RecipeError(f"shape {recipe.shape!r} is not one of the recipe's shapes: {', '.join(recipe.shapes)}")
    for name in recipe.shapes:
        try:
            recipe.model_config(name)
        except (TypeError, ValueError, KeyError) as err:
            raise RecipeError(f"[shapes.{name}] is not a model shape over preset {recipe.preset!r}: {err}") from None
    size, largest = recipe.export_bytes()
    if size > recipe.max_checkpoint_bytes or largest > recipe.max_file_bytes:
        raise RecipeError(f"shape {recipe.shape!r} exports {size:,} bytes with a largest tensor of {largest:,}; the "
                          f"recipe allows {recipe.max_checkpoint_bytes:,} and files of {recipe.max_file_bytes:,}: "
                          f"pick a smaller shape (PROGRESS.md lists each shape's size)")


def stage_config(recipe: Recipe, spec: StageSpec, work: Path, data_root: Path, start: dict[str, Any],
                 continuing: bool = False, source_dir: Path | None = None):
    """The stage's config: its file's fields (and --set), the recipe's wiring (outputs in `work`, data files under
    `data_root`), and `start` (a continuation's init_weights/start_step/data_offset_rows, the time limit). A stage
    `continuing` from its own checkpoint takes the model (or, trained from scratch, the tokenizer) from that
    checkpoint, so the checkpoint it started from need not be on this machine; else the one it starts from is
    `source_dir` (default: that stage's checkpoint in `work`)."""
    if spec.kind == "tokenizer":
        try:
            return TokenizerSettings(**spec.values)
        except TypeError as err:
            raise RecipeError(f"{spec.config_file}: {err}; a tokenizer stage takes "
                              f"{[f.name for f in fields(TokenizerSettings)]}") from None
    from .rl_config import RLConfig
    from .sft_config import SFTConfig

    values = {**spec.values, "output_dir": str(work / spec.name), "max_shard_bytes": recipe.max_file_bytes, **start}
    source = recipe.stage(spec.source)
    base = work / spec.name / CHECKPOINT if continuing else source_dir or work / source.name / CHECKPOINT
    if source.kind == "tokenizer":
        values.update(recipe.from_scratch_fields(base))
    else:
        values["model"] = str(base)

    def files(names: list[str]) -> list[str]:
        return [str(data_root / recipe.data[name].path) for name in names]

    values["eval_files"] = files(spec.eval)
    values["train_files" if spec.kind == "sft" else "task_files"] = files(spec.train)
    config_class = SFTConfig if spec.kind == "sft" else RLConfig
    try:
        config = config_class.from_dict(values, source=str(spec.config_file))
    except ValueError as err:
        raise RecipeError(str(err)) from None
    if spec.kind == "sft" and config.max_steps is None:
        raise RecipeError(f"{spec.config_file}: a recipe's SFT stage sets max_steps, so that its plan is known "
                          f"before it runs (and a later run knows when it is done)")
    return config


# --- running the stages ---------------------------------------------------------------------------------------------


@dataclass
class StageStart:
    """How a stage run begins: "fresh", "state" (exact resume) or "weights" (its checkpoint, a fresh optimizer)."""

    mode: str
    step: int = 0
    rows_consumed: int = 0


class RecipeRunner:
    def __init__(self, recipe: Recipe, work: Path, data_root: Path, max_minutes: float | None = None):
        self.recipe, self.work, self.data_root = recipe, work, data_root
        self.deadline = time.monotonic() + 60 * max_minutes if max_minutes is not None else None
        self.log = ProgressLog(recipe)
        self._hashes: dict[Path, str] = {}

    def run(self, stages: list[StageSpec], restart: list[str] = ()) -> int:
        names = [s.name for s in stages]
        for name in restart:
            if name not in names:
                raise RecipeError(f"--restart {name}: not among the stages this run takes ({', '.join(names)})")
            shutil.rmtree(self.work / name, ignore_errors=True)
            self.log.reset(name)
        first = self.recipe.stages.index(stages[0])
        for earlier in self.recipe.stages[:first]:
            if self.finished(earlier) is None:
                raise RecipeError(f"stage {stages[0].name} needs {earlier.name} done first (the log does not say it is, "
                                  f"and {self.work / earlier.name / CHECKPOINT} holds no finished checkpoint); run the "
                                  f"recipe without --only")
        self.log.write()
        waiting = [spec for spec in stages if self.finished(spec) is None]
        for spec in waiting:  # all of them now: a bad file found after hours of training costs those hours
            self.check_data(spec)
        for spec in stages:
            if spec not in waiting:
                here = "" if (self.work / spec.name / CHECKPOINT).is_dir() else ", not on this machine"
                print(f"recipe: {spec.name} is done (checkpoint {self.log.stage(spec.name)['checkpoint_sha256'][:12]}"
                      f"{here})", file=sys.stderr)
                continue
            remaining = None if self.deadline is None else (self.deadline - time.monotonic()) / 60
            if remaining is not None and remaining < MIN_STAGE_MINUTES:
                print(f"recipe: out of time before {spec.name}; run the same command again to continue",
                      file=sys.stderr)
                return EXIT_OUT_OF_TIME
            if not self.run_stage(spec, remaining):
                print(f"recipe: {spec.name} stopped at the time limit; run the same command again to continue",
                      file=sys.stderr)
                return EXIT_OUT_OF_TIME
        print(f"recipe: {', '.join(names)} done; log in {self.recipe.folder / PROGRESS_MD}")
        return EXIT_OK

    # --- what a stage is made from, and whether it is done

    def fingerprint(self, spec: StageSpec) -> str:
        """The stage's inputs: its data files' sha256, the checkpoint it starts from, the shape (and a tokenizer's
        settings, which make it whole)."""
        parts: dict[str, Any] = {"kind": spec.kind, "data": {n: self.recipe.data[n].sha256 for n in spec.data_names}}
        if spec.kind == "tokenizer":
            parts.update(vocab_size=self.recipe.shape_fields["vocab_size"], settings=spec.values)
        else:
            source = self.recipe.stage(spec.source)
            parts["from"] = self.log.stage(source.name).get("checkpoint_sha256")
            if source.kind == "tokenizer":
                parts["shape"] = self.recipe.shape_fields
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    def finished(self, spec: StageSpec) -> dict | None:
        """The done marker of a stage that took its planned steps, or None. Done means: its checkpoint is here and is
        the one done.json (or the log) names, or it is not on this machine and the log says the stage is done (a
        fresh machine that got only a later stage's checkpoint). A checkpoint other than the one the log calls done,
        or a stage made from other inputs, is an error: it would be skipped or continued on the wrong basis."""
        folder = self.work / spec.name
        checkpoint = folder / CHECKPOINT
        record = self.log.stage(spec.name)
        logged_done = record if record.get("status") == "done" else None
        if not checkpoint.is_dir():
            marker = logged_done
        else:
            sha = checkpoint_sha256(checkpoint)
            if logged_done is not None and logged_done.get("checkpoint_sha256") != sha:
                raise RecipeError(f"{checkpoint} (sha256 {sha[:16]}) is not the checkpoint {PROGRESS_JSON} records for "
                                  f"the finished stage {spec.name} ({str(logged_done.get('checkpoint_sha256'))[:16]}); "
                                  f"put the right one there, or pass --restart {spec.name}")
            marker = _read_json(folder / DONE_FILE) or logged_done
            if marker is None or marker.get("checkpoint_sha256") != sha:
                return None
        if marker is None:
            return None
        self._check_fingerprint(spec, marker.get("fingerprint"), f"{folder / DONE_FILE} or {PROGRESS_JSON}")
        if marker.get("steps_done", 0) < self.recipe.planned_steps(spec):
            return None
        record.update(status="done", checkpoint_sha256=marker["checkpoint_sha256"])
        return marker

    def config(self, spec: StageSpec, start: dict[str, Any] | None = None, continuing: bool = False):
        source_dir = None if continuing or spec.source is None else self.source_checkpoint(spec)
        return stage_config(self.recipe, spec, self.work, self.data_root, start or {}, continuing, source_dir)

    def source_checkpoint(self, spec: StageSpec) -> Path:
        """The checkpoint a fresh run of the stage starts from: its source stage's in the work folder, or else the
        embedded default checkpoint when its model card says it is that stage's checkpoint (this recipe, that stage,
        the sha256 the log records for it: what `--ship` wrote), so a fresh GPU machine continues from the shipped
        weights without carrying a copy; RecipeError when neither is there."""
        from dice_copilot.model.checkpoint import DEFAULT_CHECKPOINT_DIR, model_card_metadata

        source = self.work / spec.source / CHECKPOINT
        if source.is_dir():
            return source
        recorded = self.log.stage(spec.source).get("checkpoint_sha256")
        shipped = model_card_metadata(DEFAULT_CHECKPOINT_DIR).get("dice_copilot_heldout") \
            if (DEFAULT_CHECKPOINT_DIR / "config.json").is_file() else None
        if isinstance(shipped, dict) and recorded and shipped.get("recipe") == self.recipe.name and \
                shipped.get("stage") == spec.source and shipped.get("checkpoint_sha256") == recorded:
            return DEFAULT_CHECKPOINT_DIR
        raise RecipeError(f"stage {spec.name} starts from {source} (sha256 {str(recorded)[:16]}), which is not on "
                          f"this machine (nor shipped as the embedded default): carry it there")

    def _check_fingerprint(self, spec: StageSpec, made_from: str | None, where: str) -> None:
        if made_from is not None and made_from != self.fingerprint(spec):
            raise RecipeError(f"{self.work / spec.name} was made from other inputs (data, the stage it starts from, or "
                              f"the shape) than the recipe names now ({where}); pass --restart {spec.name} to make it "
                              f"again from the current ones")

    def how_to_start(self, spec: StageSpec) -> StageStart:
        from .training_run import POSITION_FILE, latest_state

        folder = self.work / spec.name
        if spec.kind == "tokenizer":
            return StageStart("fresh")
        made_from = (_read_json(folder / STAGE_FILE) or {}).get("fingerprint") or \
            self.log.stage(spec.name).get("fingerprint")
        state = latest_state(folder)
        position = _read_json(folder / CHECKPOINT / POSITION_FILE)
        if state is None and position is None:
            return StageStart("fresh")
        self._check_fingerprint(spec, made_from, f"{folder / STAGE_FILE} or {PROGRESS_JSON}")
        if made_from is None:
            raise RecipeError(f"{folder} holds a run whose inputs are not recorded ({STAGE_FILE} and the log's record "
                              f"are missing); pass --restart {spec.name}, or carry its {STAGE_FILE} along")
        if state is not None:
            saved = _read_json(state / "trainer_state.json")
            return StageStart("state", saved["step"], saved.get("rows_consumed", 0))
        return StageStart("weights", position["step"], position["rows_consumed"])

    # --- one stage

    def run_stage(self, spec: StageSpec, minutes_left: float | None) -> bool:
        """Run (or continue) a stage; True when it reached its planned steps, False when the time limit stopped it.
        A run that fails or is interrupted is logged too, as far as its last saved checkpoint got."""
        folder = self.work / spec.name
        start = self.how_to_start(spec)
        if start.mode == "fresh" and spec.source is not None:
            source = self.source_checkpoint(spec)  # there, or say what to carry before anything is written
            if source != self.work / spec.source / CHECKPOINT:
                print(f"recipe: {spec.name} starts from the embedded default checkpoint, which is stage "
                      f"{spec.source}'s (sha256 {str(self.log.stage(spec.source).get('checkpoint_sha256'))[:16]})",
                      file=sys.stderr)
        fingerprint = self.fingerprint(spec)
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / STAGE_FILE, {"stage": spec.name, "fingerprint": fingerprint})
        planned = self.recipe.planned_steps(spec)
        record = self.log.stage(spec.name)
        record.update(status="running", fingerprint=fingerprint, steps_done=start.step,
                      rows_consumed=start.rows_consumed)
        record.pop("error", None)
        self.log.write()
        print(f"recipe: {spec.name} ({spec.kind}) {_START_WORDS[start.mode]} at step {start.step}/{planned}",
              file=sys.stderr)
        run = {"started": _now(), "from": start.mode, "device": _device()[0]}
        began = time.monotonic()
        try:
            outcome = self._train(spec, start, minutes_left)
        except BaseException as err:  # an error or an interruption (Ctrl-C, SIGTERM): log how far it got
            status = "failed" if isinstance(err, RecipeError) else "interrupted"
            self._close_run(spec, record, run, began, start, self._saved_position(spec, start), status)
            if status == "failed":
                record["error"] = str(err)
            self.log.write()
            raise
        done = outcome.steps >= planned
        self._close_run(spec, record, run, began, start, (outcome.steps, outcome.rows_consumed),
                        "done" if done else "stopped")
        if outcome.heldout:
            record.setdefault("heldout", {})["trainer"] = outcome.heldout
        if done:
            _write_json(folder / DONE_FILE, {"stage": spec.name, "checkpoint_sha256": record["checkpoint_sha256"],
                                             "fingerprint": fingerprint, "steps_done": outcome.steps})
        self.log.write()
        return done

    def _close_run(self, spec: StageSpec, record: dict, run: dict, began: float, start: StageStart,
                   position: tuple[int, int], status: str) -> None:
        """Log a finished stage run: the stage's steps and rows, its checkpoint, the minutes it took."""
        minutes = (time.monotonic() - began) / 60
        checkpoint = self.work / spec.name / CHECKPOINT
        record.update(status=status, steps_done=position[0], rows_consumed=position[1],
                      checkpoint_sha256=checkpoint_sha256(checkpoint) if checkpoint.is_dir() else None,
                      minutes=round(record.get("minutes", 0.0) + minutes, 2),
                      gpu_minutes=round(record.get("gpu_minutes", 0.0) + minutes * _device()[1], 2))
        record.setdefault("runs", []).append({**run, "steps": [start.step, position[0]], "minutes": round(minutes, 2),
                                              "ended": status})

    def _saved_position(self, spec: StageSpec, start: StageStart) -> tuple[int, int]:
        """(step, rows consumed) of the stage's last saved checkpoint (where a run that stopped early got to)."""
        from .training_run import POSITION_FILE

        position = _read_json(self.work / spec.name / CHECKPOINT / POSITION_FILE)
        if spec.kind == "tokenizer" or position is None:
            return start.step, start.rows_consumed
        return position["step"], position["rows_consumed"]

    def _train(self, spec: StageSpec, start: StageStart, minutes_left: float | None) -> "_Outcome":
        if spec.kind == "tokenizer":
            return self._train_tokenizer(spec)
        wiring: dict[str, Any] = {}
        if minutes_left is not None:
            wiring["max_minutes"] = minutes_left
        if start.mode == "weights":
            wiring.update(init_weights=str(self.work / spec.name / CHECKPOINT), start_step=start.step,
                          data_offset_rows=start.rows_consumed)
        config = self.config(spec, wiring, continuing=start.mode != "fresh")
        if spec.kind == "sft":
            from .sft import SFTError, train_sft
            from .sft_config import SFTConfigError
            from .sft_data import SFTDataError

            try:
                result = train_sft(config)
            except (SFTConfigError, SFTDataError, SFTError) as err:
                raise RecipeError(f"stage {spec.name}: {err}") from err
            heldout = {"eval_loss": result.eval_losses[-1][1], "step": result.eval_losses[-1][0]} \
                if result.eval_losses else {}
            return _Outcome(result.steps, result.rows_consumed, heldout)
        from .rl import RLError, train_rl
        from .rl_config import RLConfigError
        from .rl_data import RLDataError
        from .rl_rewards import RewardError
        from .sft import SFTError

        try:
            result = train_rl(config)
        except (RLConfigError, RLDataError, RLError, RewardError, SFTError) as err:
            raise RecipeError(f"stage {spec.name}: {err}") from err
        evaluated = [h for h in result.history if "eval_reward_mean" in h]
        heldout = {k: v for k, v in evaluated[-1].items() if k.startswith("eval_") or k == "step"} if evaluated else {}
        return _Outcome(result.steps, result.rows_consumed, heldout)

    def _train_tokenizer(self, spec: StageSpec) -> "_Outcome":
        from .tokenizer_training import TokenizerTrainingError, train_tokenizer

        settings = self.config(spec)
        paths = [self.data_root / self.recipe.data[name].path for name in spec.train]
        folder = self.work / spec.name
        staging = folder / f".{CHECKPOINT}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            train_tokenizer(_corpus_texts(paths, settings.max_chars_per_file), self.recipe.shape_fields["vocab_size"],
                            staging, min_frequency=settings.min_frequency)
        except TokenizerTrainingError as err:
            raise RecipeError(f"stage {spec.name}: {err}") from err
        shutil.rmtree(folder / CHECKPOINT, ignore_errors=True)
        os.replace(staging, folder / CHECKPOINT)
        return _Outcome(1, 0, {})

    # --- data

    def check_data(self, spec: StageSpec) -> None:
        """Every file the stage reads is there and has its pinned sha256 (its manifest too)."""
        for name in spec.data_names:
            entry = self.recipe.data[name]
            for key, relative, pinned in entry.files():
                path = self.data_root / relative
                if not path.is_file():
                    hint = f"; make it with: {entry.made_by.format(data=self.data_root)}" if entry.made_by else ""
                    raise RecipeError(f"data file {name} ({path}) is missing{hint} (or pass --make-data)")
                if not pinned:
                    raise RecipeError(f"data file {name} ({path}) has no {key} in {self.recipe.folder / RECIPE_FILE}; "
                                      f"pin the files you mean to train on with --pin-data")
                actual = self.file_hash(path)
                if actual != pinned:
                    raise RecipeError(f"data file {name} ({path}) has sha256 {actual}, but the recipe names {pinned}: "
                                      f"it is not the file the recipe trains on; rebuild it "
                                      f"({entry.made_by.format(data=self.data_root) or 'see the recipe'}) or, if "
                                      f"the recipe should change, edit its {key} in {RECIPE_FILE}")

    def file_hash(self, path: Path) -> str:
        if path not in self._hashes:
            self._hashes[path] = file_sha256(path)
        return self._hashes[path]


@dataclass
class _Outcome:
    steps: int
    rows_consumed: int
    heldout: dict


_START_WORDS = {"fresh": "starts", "state": "resumes from its state", "weights": "continues from its checkpoint's weights"}


def _corpus_texts(paths: list[Path], max_chars_per_file: int | None):
    """The tokenizer's training text, file by file: the text pieces of each JSONL record (as `train tokenizer` reads
    .jsonl files, .xz ones too: split at the special tokens; a {"text"} record is one piece) or each other file
    whole. A file holding more than `max_chars_per_file` characters gives every k-th piece, k the smallest stride
    that brings it to about the limit, so the sample spans the whole file."""
    from .tokenizer_training import jsonl_texts

    def pieces(path: Path):
        texts = jsonl_texts(path) if path.name.endswith((".jsonl", ".jsonl.xz")) else [path.read_text("utf-8")]
        return (text for text in texts if text)

    for path in paths:
        stride = 1
        if max_chars_per_file is not None:
            stride = max(1, math.ceil(sum(map(len, pieces(path))) / max_chars_per_file))
        for index, text in enumerate(pieces(path)):
            if index % stride == 0:
                yield text


def make_missing_data(recipe: Recipe, data_root: Path, stages: list["StageSpec"]) -> None:
    """Run the `made_by` command of every data file the stages read that is missing (each command once), from the
    working folder."""
    commands = []
    wanted = {name for spec in stages for name in spec.data_names}
    for name, entry in recipe.data.items():
        if name not in wanted:
            continue
        missing = any(not (data_root / relative).is_file() for _, relative, _ in entry.files())
        if missing and entry.made_by and entry.made_by not in commands:
            commands.append(entry.made_by)
    for command in commands:
        words = shlex.split(command.format(data=data_root))
        print(f"recipe: making data: {shlex.join(words)}", file=sys.stderr)
        if subprocess.run(words).returncode != 0:
            raise RecipeError(f"the data command failed: {shlex.join(words)}")


def pin_data(recipe: Recipe, data_root: Path) -> list[str]:
    """Write the sha256 of each present data file whose recipe entry has none into recipe.toml; a pinned entry whose
    file differs is an error. Returns the entries pinned."""
    path = recipe.folder / RECIPE_FILE
    text = path.read_text()
    pinned = []
    for entry in recipe.data.values():
        for key, relative, sha in entry.files():
            file = data_root / relative
            if not file.is_file():
                continue
            actual = file_sha256(file)
            if sha and sha != actual:
                raise RecipeError(f"data file {entry.name} ({file}) has sha256 {actual}, but {path} pins {sha}; "
                                  f"pinning never replaces a pin: edit the file if the recipe should change")
            if not sha:
                text = _set_table_value(text, f"data.{entry.name}", key, actual)
                pinned.append(f"{entry.name} ({key})")
    path.write_text(text)
    return pinned


def _set_table_value(text: str, table: str, key: str, value: str) -> str:
    """`key = ""` inside the TOML table `[table]` replaced by `key = "value"` (comments and layout kept)."""
    header = re.search(rf"^\[{re.escape(table)}\][ \t]*(#.*)?$", text, re.M)
    if header is None:
        raise RecipeError(f"cannot find [{table}] in {RECIPE_FILE} to pin its {key}")
    end = re.search(r"^\[", text[header.end():], re.M)
    body_end = header.end() + (end.start() if end else len(text) - header.end())
    body = text[header.end():body_end]
    line = re.compile(rf'^({re.escape(key)}[ \t]*=[ \t]*)""', re.M)
    if not line.search(body):
        raise RecipeError(f"[{table}] in {RECIPE_FILE} has no `{key} = \"\"` line to pin; add one")
    return text[:header.end()] + line.sub(lambda m: f'{m[1]}"{value}"', body, count=1) + text[body_end:]


# --- the log --------------------------------------------------------------------------------------------------------


class ProgressLog:
    """progress.json and PROGRESS.md in the recipe folder: where each stage stands."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.path = recipe.folder / PROGRESS_JSON
        self.data = _read_json(self.path) or {}
        self.data.setdefault("recipe", recipe.name)
        self.data.setdefault("stages", {})

    def stage(self, name: str) -> dict:
        return self.data["stages"].setdefault(name, {"status": "pending"})

    def reset(self, name: str) -> None:
        self.data["stages"][name] = {"status": "pending"}

    def write(self, replan: bool = True) -> None:
        """Write both files; `replan`: the shape and each stage's planned steps become the recipe's as loaded (a
        run's, with its --set), which a record made outside a run leaves as the last run wrote them."""
        self.data["updated"] = _now()
        self.data["stages"] = {s.name: self.stage(s.name) for s in self.recipe.stages}
        if replan or "shape" not in self.data:
            self.data["shape"] = self.recipe.shape
            for spec in self.recipe.stages:
                self.stage(spec.name)["steps_planned"] = self.recipe.planned_steps(spec)
        _write_json(self.path, self.data)
        _write_atomic(self.recipe.folder / PROGRESS_MD, progress_markdown(self.recipe, self.data))


def record_heldout_scores(recipe_dir: Path, stage: str, name: str, scores: dict) -> None:
    """Add held-out scores measured outside training (e.g. bench/model_eval.py's) to a stage's record in the log."""
    recipe = load_recipe(recipe_dir)
    recipe.stage(stage)
    log = ProgressLog(recipe)
    log.stage(stage).setdefault("heldout", {})[name] = scores
    log.write(replan=False)


def progress_markdown(recipe: Recipe, data: dict) -> str:
    lines = [f"# {recipe.name}: progress", "",
             f"Written by `dice-copilot train recipe` (from {PROGRESS_JSON}); last update {data.get('updated', '-')}.",
             "", "| stage | status | steps | data rows | minutes | GPU minutes | held-out | checkpoint sha256 |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for spec in recipe.stages:
        r = data["stages"].get(spec.name, {})
        steps = f"{r.get('steps_done', 0)}/{r.get('steps_planned', '?')}"
        lines.append(f"| {spec.name} | {r.get('status', 'pending')} | {steps} | {r.get('rows_consumed', 0):,} | "
                     f"{r.get('minutes', 0)} | {r.get('gpu_minutes', 0)} | {heldout_text(r.get('heldout', {}))} | "
                     f"{(r.get('checkpoint_sha256') or '-')[:16]} |")
    lines += ["", f"## Model shapes (≤ {recipe.max_checkpoint_bytes / 1e6:g} MB exported, files ≤ "
                  f"{recipe.max_file_bytes / 1e6:g} MB)", "",
              "| shape | layers | width | heads / kv | MLP | vocab | block | parameters | exported MB | |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name in recipe.shapes:
        c = recipe.model_config(name)
        size, largest = recipe.export_bytes(name)
        fits = size <= recipe.max_checkpoint_bytes and largest <= recipe.max_file_bytes
        mark = "**trained**" if name == data["shape"] else ("" if fits else "too large")
        lines.append(f"| {name} | {c.num_hidden_layers} | {c.hidden_size} | {c.num_attention_heads} / "
                     f"{c.num_key_value_heads} | {c.intermediate_size} | {c.vocab_size} | {c.block_size} | "
                     f"{c.num_parameters:,} | {size / 1e6:.1f} | {mark} |")
    lines += ["", "## Data", "", "| name | path | sha256 |", "| --- | --- | --- |"]
    lines += [f"| {d.name} | {d.path} | {d.sha256[:16] or 'not pinned'} |" for d in recipe.data.values()]
    return "\n".join(lines) + "\n"


def heldout_text(heldout: dict) -> str:
    parts = []
    for source, scores in heldout.items():
        shown = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in scores.items())
        parts.append(f"{source}: {shown}")
    return "; ".join(parts) or "-"


# --- files ----------------------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_sha256(folder: Path) -> str:
    """One sha256 for a checkpoint folder: over each file's name and sha256, in name order, leaving out
    generation_config.json: the decoding defaults chosen for a finished stage (bench/model_eval.py --write-defaults)
    leave it the same checkpoint."""
    from dice_copilot.model.checkpoint import GENERATION_CONFIG_FILE

    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != GENERATION_CONFIG_FILE:
            digest.update(f"{name}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict) -> None:
    _write_atomic(path, json.dumps(data, indent=2) + "\n")


def _write_atomic(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    os.replace(staging, path)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _device() -> tuple[str, int]:
    """(what trains here, GPUs counted for the GPU minutes): a stage runs on the first GPU when there is one."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), 1
    return "cpu", 0
