"""`dice-copilot train recipe RECIPE_DIR --work WORK --ship [DEST]`: a finished stage's checkpoint becomes the shipped
one (by default the embedded checkpoint, model/default_checkpoint), with its model card, when it beats the one there.

What is shipped: the checkpoint of the last finished stage that trains a model (or `--stage STAGE`), scored on the
held-out sets by `bench/model_eval.py --record RECIPE_DIR:STAGE` on a machine with a GPU (its "model_eval (full)"
record in progress.json; a compile-only run measures no exec@1).

"Beats": a higher CuKe held-out exec@1 correct rate (`cuke_heldout.correct_rate`: greedy answers that pass the strict
validator), or an equal one and a higher compile rate (`cuke_heldout.compile_rate`). The card of a shipped checkpoint
keeps the scores it was shipped by in its YAML metadata (`dice_copilot_heldout`), which the next --ship compares with.
No checkpoint at DEST, or an untrained one, is beaten by any scores; a trained one whose card records none, or scores
on another held-out set (by its sha256), cannot be compared: refused, unless --force.

DEST is replaced atomically (model/checkpoint.py save): bf16 weights in files of at most the recipe's max_file_bytes
and at most max_checkpoint_bytes in all (checked before DEST is touched), the tokenizer files, config.json, the
stage's generation_config.json (with the decoding defaults bench/model_eval.py --write-defaults chose), and README.md:
the model card, whose every figure comes from recipe.toml, progress.json and the checkpoint's own config.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .recipe import CHECKPOINT, PROGRESS_JSON, Recipe, RecipeError, RecipeRunner, StageSpec, heldout_text

# The held-out record a checkpoint is shipped by: bench/model_eval.py --record on a machine with a GPU.
SCORES_SOURCE = "model_eval (full)"
# The scores compared, most important first (bench/model_eval.py records them as SET.METRIC).
RANKING = ("cuke_heldout.correct_rate", "cuke_heldout.compile_rate")
# How many held-out problems they were measured on (bench/model_eval.py --limit scores fewer).
PROBLEMS = "cuke_heldout.problems"
# The recipe's data entry those scores are measured on: its sha256 says whether two cards' scores compare.
HELDOUT_DATA = "cuke_heldout"
# The model card's metadata key holding the scores it was shipped by.
CARD_KEY = "dice_copilot_heldout"
# A weight file is its tensors and a JSON header naming them (~150 bytes a tensor): room for it under max_file_bytes.
HEADER_ROOM = 1 << 16


def ship(recipe: Recipe, work: Path, data_root: Path, dest_name: str, stage: str | None = None,
         force: bool = False) -> Path:
    """Write the stage's checkpoint (by default the last finished one) with its model card to DEST (`default`: the
    embedded checkpoint), if it beats the one there or `force`; RecipeError says why not and what to do."""
    from dice_copilot.model.checkpoint import (DEFAULT_CHECKPOINT_DIR, DEFAULT_CHECKPOINT_NAMES,
                                               GENERATION_CONFIG_FILE, MODEL_CARD_FILE, CheckpointError, load,
                                               read_decoding_defaults, save)

    runner = RecipeRunner(recipe, work, data_root)
    spec = _stage_to_ship(runner, stage)
    checkpoint = work / spec.name / CHECKPOINT
    record = runner.log.stage(spec.name)
    shipped_by = {"recipe": recipe.name, "stage": spec.name, "checkpoint_sha256": record["checkpoint_sha256"],
                  "source": SCORES_SOURCE, "heldout_sha256": _heldout_sha256(recipe),
                  "scores": _recorded_scores(recipe, spec, record, checkpoint, data_root)}
    dest = DEFAULT_CHECKPOINT_DIR if dest_name in DEFAULT_CHECKPOINT_NAMES else Path(dest_name).expanduser().absolute()
    _refuse_unless_beaten(dest, spec, shipped_by, force)
    try:
        model, tokenizer = load(checkpoint, dtype="bfloat16")
        decoding = read_decoding_defaults(checkpoint)
        card = model_card(recipe, runner.log.data, spec, model.config, tokenizer.vocab_size, decoding, shipped_by,
                          _heldout_rows(recipe, data_root))
        extra = {MODEL_CARD_FILE: card}
        if (checkpoint / GENERATION_CONFIG_FILE).is_file():  # the decoding defaults measured for it
            extra[GENERATION_CONFIG_FILE] = (checkpoint / GENERATION_CONFIG_FILE).read_text(encoding="utf-8")
        save(model, tokenizer, dest, max_shard_bytes=recipe.max_file_bytes - HEADER_ROOM, extra_files=extra,
             verify=lambda folder: _check_sizes(recipe, folder))
    except CheckpointError as err:
        raise RecipeError(f"cannot ship {checkpoint} to {dest}: {err}") from err
    weights = sorted(dest.glob("*.safetensors"))
    scores = ", ".join(f"{name} {shipped_by['scores'][name]:.4g}" for name in RANKING)
    print(f"recipe: shipped stage {spec.name} to {dest} ({len(weights)} weight file(s), "
          f"{sum(p.stat().st_size for p in weights) / 1e6:.1f} MB of bf16 weights; {scores})")
    return dest


def beats(new: dict, old: dict) -> bool:
    """Whether held-out scores `new` beat `old` (see the module docstring)."""
    return tuple(new[name] for name in RANKING) > tuple(old[name] for name in RANKING)


# --- what is shipped, and whether it may replace DEST --------------------------------------------------------------


def _stage_to_ship(runner: RecipeRunner, name: str | None) -> StageSpec:
    """The stage named, or the last finished one that trains a model; finished, with its checkpoint here."""
    recipe = runner.recipe
    if name is not None:
        spec = recipe.stage(name)
        if spec.kind == "tokenizer":
            raise RecipeError(f"stage {name} makes a tokenizer, not a model: --stage names a stage that trains one")
        if runner.finished(spec) is None:
            record = runner.log.stage(name)
            raise RecipeError(f"stage {name} is not finished ({record.get('status', 'pending')}, step "
                              f"{record.get('steps_done', 0)} of {recipe.planned_steps(spec)} in {PROGRESS_JSON}): "
                              f"run the recipe until it is, with the --set options it runs with, then ship")
    else:
        models = [s for s in recipe.stages if s.kind != "tokenizer"]
        spec = next((s for s in reversed(models) if runner.finished(s) is not None), None)
        if spec is None:
            raise RecipeError(f"no stage that trains a model is finished ({', '.join(s.name for s in models)}; see "
                              f"{recipe.folder / PROGRESS_JSON}): run the recipe first, and ship with the --set "
                              f"options it runs with")
    checkpoint = runner.work / spec.name / CHECKPOINT
    if not checkpoint.is_dir():
        raise RecipeError(f"the checkpoint of the finished stage {spec.name} is not on this machine ({checkpoint}; "
                          f"{PROGRESS_JSON} records sha256 {runner.log.stage(spec.name)['checkpoint_sha256'][:16]}): "
                          f"put it there, then ship")
    return spec


def _recorded_scores(recipe: Recipe, spec: StageSpec, record: dict, checkpoint: Path, data_root: Path) -> dict:
    recorded = record.get("heldout", {})
    scores = recorded.get(SCORES_SOURCE, {})
    if all(isinstance(scores.get(name), (int, float)) for name in RANKING):
        return dict(scores)
    heldout = data_root / recipe.data[HELDOUT_DATA].path if HELDOUT_DATA in recipe.data else "eval_heldout.jsonl"
    others = f" (it holds {', '.join(recorded)} only)" if recorded else ""
    raise RecipeError(f"no held-out scores to ship stage {spec.name} by: {PROGRESS_JSON} records no "
                      f"{' and '.join(RANKING)} from {SCORES_SOURCE!r} for it{others}. Measure them on a machine with "
                      f"a GPU (a compile-only run measures no exec@1): python3 bench/model_eval.py --checkpoint "
                      f"{checkpoint} --cuke-heldout {heldout} --record {recipe.folder}:{spec.name} [--write-defaults]")


def _heldout_rows(recipe: Recipe, data_root: Path) -> int | None:
    """How many problems the CuKe held-out file holds (None when it is not on this machine)."""
    entry = recipe.data.get(HELDOUT_DATA)
    path = data_root / entry.path if entry else None
    if path is None or not path.is_file():
        return None
    with path.open(encoding="utf-8") as rows:
        return sum(1 for line in rows if line.strip())


def _heldout_sha256(recipe: Recipe) -> str | None:
    entry = recipe.data.get(HELDOUT_DATA)
    return entry.sha256 or None if entry else None


def _refuse_unless_beaten(dest: Path, spec: StageSpec, shipped_by: dict, force: bool) -> None:
    """Refuse a DEST that is not a checkpoint folder (always) or holds one the new scores do not beat (unless
    `force`)."""
    from dice_copilot.model.checkpoint import CONFIG_FILE, MODEL_CARD_FILE, CheckpointError, model_card_metadata, \
        read_config

    if not dest.exists() or dest.is_dir() and not any(dest.iterdir()):
        return
    if not dest.is_dir() or not (dest / CONFIG_FILE).is_file():
        raise RecipeError(f"{dest} is not a checkpoint folder (no {CONFIG_FILE}); --ship replaces only a checkpoint: "
                          f"name a new or empty folder, or a checkpoint's")
    if force:
        return
    try:
        untrained = read_config(dest).untrained
    except CheckpointError as err:
        raise RecipeError(f"cannot read the checkpoint at {dest} to compare with ({err}); pass --force to replace "
                          f"it") from err
    if untrained:
        return
    old = model_card_metadata(dest).get(CARD_KEY)
    old_scores = old.get("scores") if isinstance(old, dict) else None
    if not isinstance(old_scores, dict) or not all(isinstance(old_scores.get(n), (int, float)) for n in RANKING):
        raise RecipeError(f"{dest} holds a trained checkpoint whose {MODEL_CARD_FILE} records no held-out scores "
                          f"({CARD_KEY} with {' and '.join(RANKING)} in its metadata), so whether stage {spec.name} "
                          f"beats it cannot be told; pass --force to replace it")
    if old.get("source") != shipped_by["source"] or old.get("heldout_sha256") != shipped_by["heldout_sha256"]:
        raise RecipeError(f"the checkpoint at {dest} was scored by {old.get('source')!r} on the held-out set with "
                          f"sha256 {old.get('heldout_sha256')}, stage {spec.name} by {shipped_by['source']!r} on "
                          f"{shipped_by['heldout_sha256']}: the scores do not compare; pass --force to replace it")
    problems = [s.get(PROBLEMS) for s in (shipped_by["scores"], old_scores)]
    if problems[0] != problems[1]:
        raise RecipeError(f"stage {spec.name} was scored on {problems[0]} CuKe held-out problems, the checkpoint at "
                          f"{dest} on {problems[1]} (a --limit run): the scores do not compare; score both on the "
                          f"same problems, or pass --force to replace it")
    if not beats(shipped_by["scores"], old_scores):
        shown = " vs ".join(", ".join(f"{n} {s[n]:.4g}" for n in RANKING) for s in (shipped_by["scores"], old_scores))
        raise RecipeError(f"stage {spec.name} does not beat the checkpoint at {dest} on the held-out scores ({shown}): "
                          f"a new checkpoint is shipped only with a higher {RANKING[0]}, or an equal one and a higher "
                          f"{RANKING[1]}; pass --force to replace it anyway")


def _check_sizes(recipe: Recipe, folder: Path) -> None:
    """The written weight files are within the recipe's limits (else DEST is left as it was)."""
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.safetensors")}
    largest = max(sizes, key=sizes.get)
    if sizes[largest] > recipe.max_file_bytes or sum(sizes.values()) > recipe.max_checkpoint_bytes:
        raise RecipeError(f"the checkpoint's weights take {sum(sizes.values()):,} bytes with a largest file of "
                          f"{sizes[largest]:,} ({largest}); the recipe ships at most {recipe.max_checkpoint_bytes:,} "
                          f"in files of at most {recipe.max_file_bytes:,}: train a smaller shape")


# --- the model card -------------------------------------------------------------------------------------------------


def model_card(recipe: Recipe, progress: dict, spec: StageSpec, config, tokens: int, decoding: dict,
               shipped_by: dict, heldout_rows: int | None = None) -> str:
    """README.md of the shipped checkpoint: YAML metadata (with the scores it was shipped by), then what the model is,
    how it was made, how it scores, what it cannot do and what to use instead. Figures come from `progress` (the
    recipe's log), the recipe, the checkpoint's `config` and `heldout_rows` (the CuKe held-out file's size) only."""
    stages = _lineage(recipe, spec)
    records = {s.name: progress["stages"].get(s.name, {}) for s in stages}
    runs = [run for r in records.values() for run in r.get("runs", [])]
    minutes = round(sum(r.get("minutes", 0) for r in records.values()), 2)
    gpu_minutes = round(sum(r.get("gpu_minutes", 0) for r in records.values()), 2)
    devices = sorted({run["device"] for run in runs if run.get("device")})
    scores = shipped_by["scores"]
    metadata = {"library_name": "dice-copilot", "pipeline_tag": "text-generation",
                "tags": ["dice-copilot", "block-diffusion", "cuda", "code"], CARD_KEY: shipped_by}
    tokenizer = next((s for s in stages if s.kind == "tokenizer"), None)
    trained_on = list(dict.fromkeys(name for s in stages for name in s.train))
    held_out = [name for s in stages for name in s.eval if name not in trained_on]
    lines = ["---", yaml.safe_dump(metadata, sort_keys=False).rstrip(), "---",
             f"# {recipe.name}", "",
             f"A dice-copilot checkpoint made by this project's own recipe (`{_shown(recipe.folder)}`, run by "
             f"`dice-copilot train recipe`) and shipped from its stage "
             f"`{spec.name}` (checkpoint sha256 `{shipped_by['checkpoint_sha256']}`). A block-diffusion language model "
             f"that writes CUDA kernels for PyTorch modules: whole `ModelNew` files and kernel bodies in the editor.",
             "",
             "## Held-out scores", "",
             f"Measured by `bench/model_eval.py` on a GPU ({SCORES_SOURCE!r} in `{PROGRESS_JSON}`), with the "
             f"decoding defaults below and the strict validator; `correct_rate` is exec@1 (one greedy answer per "
             f"problem), `compile_rate` the share that compiles, `fast_1` correct and faster than PyTorch. The "
             f"CuKe held-out set is `{recipe.data[HELDOUT_DATA].path if HELDOUT_DATA in recipe.data else '-'}` "
             f"(sha256 `{shipped_by['heldout_sha256'] or 'not pinned'}`){_coverage(scores, heldout_rows)}.", "",
             "| metric | score |", "| --- | ---: |"]
    lines += [f"| {name} | {_number(value)} |" for name, value in scores.items()]
    lines += ["", f"A checkpoint replaces this one only when it beats it: a higher `{RANKING[0]}`, or an equal one and "
                  f"a higher `{RANKING[1]}` (trainer/recipe_ship.py).", "",
              "## Architecture", "",
              f"DICE/SDAR layout (config.json `model_type` sdar): Qwen3 decoder layers (GQA, QK-norm, SwiGLU, RoPE) "
              f"with block-causal attention, decoding {config.block_size} tokens a block by unmasking a mask token "
              f"(id {config.mask_token_id}). Shape `{recipe.shape}`, bf16 weights:", "",
              "| field | value |", "| --- | ---: |",
              f"| parameters | {config.num_parameters:,} |",
              f"| layers | {config.num_hidden_layers} |",
              f"| hidden size | {config.hidden_size} |",
              f"| attention heads / KV heads | {config.num_attention_heads} / {config.num_key_value_heads} |",
              f"| head dim | {config.head_dim} |",
              f"| MLP width | {config.intermediate_size} |",
              f"| block size | {config.block_size} |",
              f"| vocabulary | {config.vocab_size} |",
              f"| positions | {config.max_position_embeddings} |",
              f"| tied embeddings | {'yes' if config.tie_word_embeddings else 'no'} |", "",
              "## Tokenizer", ""]
    if tokenizer is not None:
        settings = ", ".join(f"{k} {_number(v)}" for k, v in tokenizer.values.items())
        lines += [f"Byte-level BPE (Qwen2's pre-tokenizer, the DICE special tokens), trained by the recipe's stage "
                  f"`{tokenizer.name}` on {', '.join(f'`{n}`' for n in tokenizer.train)} ({settings or 'defaults'}): "
                  f"{tokens:,} tokens, in an embedding of {config.vocab_size:,} rows.", ""]
    else:
        lines += [f"{tokens:,} tokens, in an embedding of {config.vocab_size:,} rows.", ""]
    lines += ["## Training", "",
              f"{minutes} minutes in all, {gpu_minutes} GPU minutes, on {', '.join(devices) or '-'} "
              f"(from `{PROGRESS_JSON}`). Each stage's settings are in its config file in the recipe folder.", "",
              "| stage | kind | config | starts from | reads | steps | data rows | minutes | GPU minutes | "
              "held-out |", "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for s in stages:
        r = records[s.name]
        reads = ", ".join(s.train) + (f"; held out: {', '.join(s.eval)}" if s.eval else "")
        lines.append(f"| {s.name} | {s.kind} | {s.config_file.name} | {s.source or '-'} | {reads} | "
                     f"{r.get('steps_done', 0)}/{recipe.planned_steps(s)} | {r.get('rows_consumed', 0):,} | "
                     f"{r.get('minutes', 0)} | {r.get('gpu_minutes', 0)} | {heldout_text(r.get('heldout', {}))} |")
    lines += ["", "The data, by the sha256 every run checked:", "", "| data | used | path | sha256 | what it holds |",
              "| --- | --- | --- | --- | --- |"]
    for name in list(dict.fromkeys(trained_on + held_out)):
        entry = recipe.data[name]
        use = "trained on" if name in trained_on else "held out"
        for key, path, sha in entry.files():
            about = (entry.about or "-") if key == "sha256" else f"the manifest of {name}"
            lines.append(f"| {name} | {use} | {path} | `{sha or 'not pinned'}` | {about} |")
    lines += ["", "## Decoding defaults", ""]
    if decoding:
        lines += [f"In `generation_config.json`, chosen by measuring this checkpoint on the held-out sets "
                  f"(`bench/model_eval.py --write-defaults`); a flag or an editor setting overrides each:", ""]
        lines += [f"- `{key}`: {_number(value)}" for key, value in decoding.items()]
    else:
        lines += ["None measured: `generation_config.json` holds only token ids and the block size, so the commands "
                  "use their built-in decoding settings."]
    about = "; ".join(f"{name}: {recipe.data[name].about}" for name in trained_on if recipe.data[name].about)
    lines += ["", "## What it cannot do", "",
              f"- It is small: {config.num_parameters / 1e6:.1f} M parameters, trained for {gpu_minutes} GPU minutes. "
              f"{_misses(scores)} The copilot shows only suggestions that pass its validator, so with this model "
              f"many requests get none.",
              f"- It knows only what it was trained on: {about or ', '.join(trained_on)}. Other kinds of kernels, other "
              f"languages, explanations and chat are outside it.",
              f"- It reads at most {config.max_position_embeddings:,} positions (prompt and answer).",
              "- KernelBench was never used to train, select or tune it: no stage reads it, and the scores it was "
              "chosen by are CuKe's held-out split; `dice-copilot eval kernelbench` measures it as a final benchmark "
              "only.", "",
              "## Using real DICE weights instead", "",
              "This checkpoint is a small default so that the copilot works out of the box. For real suggestions point "
              "it at a DICE checkpoint (1.7B, 4B or 8B; a local folder in Hugging Face layout, SDAR or Qwen3 "
              "config.json):", "",
              "- command line: `--checkpoint PATH`, e.g. `dice-copilot generate --module FILE.py --checkpoint PATH` "
              "(and `dice-copilot eval kernelbench ... --checkpoint PATH`);",
              "- editor: the setting `diceCopilot.checkpoint` (VS Code), `checkpoint` in the Neovim plugin's setup.",
              "",
              "Nothing in this project downloads weights: put them on the machine yourself (e.g. a download of "
              "`DeadlyKitt3n/DICE-1.7B`). The larger models want a GPU (`--device cuda`, the default where there is "
              "one)."]
    return "\n".join(lines) + "\n"


def _coverage(scores: dict, heldout_rows: int | None) -> str:
    """Whether the CuKe scores are of the whole held-out file or of its first problems (a --limit run)."""
    measured = scores.get(PROBLEMS)
    if not isinstance(measured, int) or heldout_rows is None or measured >= heldout_rows:
        return f", {measured} problems" if isinstance(measured, int) else ""
    return (f"; the scores are of its first {measured} of {heldout_rows} problems (a `--limit` run), and the file is "
            f"ordered easy to hard, so they are its easiest and say little about the rest")


def _misses(scores: dict) -> str:
    """The share of each held-out set's problems without a correct greedy answer."""
    sets = sorted({name.split(".")[0] for name in scores if name.endswith(".correct_rate")})
    return " ".join(f"On the {name} set ({scores.get(f'{name}.problems', '?')} problems measured) "
                    f"{1 - scores[f'{name}.correct_rate']:.1%} of the problems get no correct greedy answer."
                    for name in sets if isinstance(scores.get(f"{name}.correct_rate"), (int, float)))


def _lineage(recipe: Recipe, spec: StageSpec) -> list[StageSpec]:
    """The stages the checkpoint was made by: the tokenizer stage first, `spec` last."""
    chain = [spec]
    while chain[-1].source is not None:
        chain.append(recipe.stage(chain[-1].source))
    return chain[::-1]


def _shown(folder: Path) -> str:
    """A folder as the card names it: from the repository root when it lies in this checkout."""
    root = Path(__file__).resolve().parents[1]
    return str(folder.relative_to(root)) if folder.is_relative_to(root) else str(folder)


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)

