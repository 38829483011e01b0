"""`dice-copilot train recipe` on the CPU: the shipped dice-tiny recipe run whole at toy size (a tiny corpus and
CuKe-format files written here, a tiny shape, a few steps a stage, RL with the compile reward), an interrupted stage
continued from its weights alone, finished stages skipped, data checked by sha256; a finished stage shipped (--ship)
with its model card only when its held-out scores beat the shipped ones; and the trainers' weights-only
continuations reading exactly the data an uninterrupted run reads next."""

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from checkpoint_helpers import UNTRAINED_CHECKPOINT
import torch
from rl_helpers import MIDDLE, PREFIX, REFERENCE, SUFFIX, short_tasks, tiny_rl_config
from sft_helpers import kernel_source, make_tokenizer, records, tiny_sft_config, write_jsonl
from safetensors import safe_open

from dice_copilot.cli import main
from dice_copilot.model import checkpoint as checkpoint_module
from dice_copilot.model import load
from dice_copilot.model.checkpoint import (model_card_metadata, model_card_says_untrained, read_decoding_defaults,
                                           write_decoding_defaults)
from dice_copilot.trainer import recipe as recipe_module
from dice_copilot.trainer import recipe_ship
from dice_copilot.trainer import sft_data, training_run
from dice_copilot.trainer.recipe import checkpoint_sha256, file_sha256, load_recipe
from dice_copilot.trainer.rl import run_rl
from dice_copilot.trainer.rl_rewards import Reward
from dice_copilot.trainer.sft import build_model_and_tokenizer, train_sft

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "trainer" / "recipes" / "dice-tiny"
pytestmark = pytest.mark.usefixtures("single_torch_thread")

TOY_SHAPE = """
[shapes.toy]
num_hidden_layers = 2
hidden_size = 64
num_attention_heads = 4
num_key_value_heads = 2
head_dim = 16
intermediate_size = 128
vocab_size = 512
block_size = 4
"""
# Every stage at toy size and CPU speed; the RL stages reward kernels that compile (no GPU here).
QUIET = dict(mixed_precision='"no"', compile="false", tensorboard="false", progress_bar="false", save_dtype='"float32"')
TOY_SETTINGS = {
    "pretrain": dict(max_steps=4, seq_len=128, per_device_batch_size=2, warmup_steps=1, eval_every_steps=2,
                     eval_rows=2, save_every_steps=2, log_every_steps=1, **QUIET),
    "sft": dict(max_steps=2, seq_len=192, per_device_batch_size=2, warmup_steps=1, save_every_steps=1,
                log_every_steps=1, **QUIET),
    "sft-v2": dict(max_steps=2, seq_len=192, per_device_batch_size=2, warmup_steps=1, save_every_steps=1,
                   log_every_steps=1, **QUIET),
    "rl-infill": dict(rl_steps=1, tasks_per_step=2, group_size=2, max_new_tokens=8, max_prompt_tokens=6000,
                      per_device_batch_size=2, grad_accum=1, reward='"compiles"', eval_tasks=1, **QUIET),
    "rl-e2e": dict(rl_steps=1, tasks_per_step=2, group_size=2, max_new_tokens=8, max_prompt_tokens=6000,
                   per_device_batch_size=2, grad_accum=1, reward='"compiles"', eval_tasks=1, **QUIET),
}


def toy_overrides() -> list[str]:
    items = ["--set", "shape=toy"]
    for stage, values in TOY_SETTINGS.items():
        for key, value in values.items():
            items += ["--set", f"{stage}.{key}={value}"]
    return items


def copy_recipe(tmp_path: Path) -> Path:
    """The shipped recipe with a toy shape added and its data pins cleared (the toy data gets pinned by the test)."""
    folder = tmp_path / "recipe"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("progress.json", "PROGRESS.md"))
    text = (folder / "recipe.toml").read_text()
    text = re.sub(r'^(sha256|manifest_sha256) = "[0-9a-f]+"', r'\1 = ""', text, flags=re.M)
    (folder / "recipe.toml").write_text(text + TOY_SHAPE)
    return folder


def write_toy_data(data: Path) -> None:
    """A corpus and CuKe-format files written for this test, at the recipe's data paths."""
    (data / "corpus").mkdir(parents=True)
    (data / "cuke").mkdir()
    texts = [kernel_source(name) for name in ("relu", "square", "negate", "scale")] + [REFERENCE, PREFIX + SUFFIX]
    write_jsonl(data / "corpus" / "train.jsonl", [{"text": t} for t in texts * 2])
    write_jsonl(data / "corpus" / "heldout.jsonl", [{"text": kernel_source(n)} for n in ("sigmoid", "softplus")])
    write_jsonl(data / "corpus" / "manifest.jsonl", [{"file": f"toy{i}.cu", "licence": "MIT"} for i in range(8)])
    task = {"pytorch_code": REFERENCE, "prefix": PREFIX, "suffix": SUFFIX}
    for version in ("cuke", "cuke-v2"):  # the two CuKe builds the recipe trains on, alike here
        (data / version).mkdir(exist_ok=True)
        write_jsonl(data / version / "sft.jsonl", records())
        # As CuKe writes them: with the middle, which SFT trains on (RL asks for it).
        write_jsonl(data / version / "infill_tasks.jsonl",
                    [{"id": f"add{i}", **task, "middle": MIDDLE} for i in range(3)])
        write_jsonl(data / version / "e2e_tasks.jsonl", [{"id": f"add{i}", "pytorch_code": REFERENCE} for i in range(3)])
        write_jsonl(data / version / "eval_heldout.jsonl", [{"id": "held", **task, "middle": ""}])


@pytest.fixture
def toy(tmp_path):
    folder, work = copy_recipe(tmp_path), tmp_path / "work"
    write_toy_data(work / "data")
    assert main(["train", "recipe", str(folder), "--work", str(work), "--pin-data"]) == 0
    return folder, work


def run_recipe(folder: Path, work: Path, *extra: str) -> int:
    return main(["train", "recipe", str(folder), "--work", str(work), *toy_overrides(), *extra])


def test_the_shipped_recipe_runs_whole_at_toy_size_and_continues_a_stage_from_its_weights(toy, monkeypatch):
    folder, work = toy
    seen_rows = []
    batch = sft_data.RowStream.batch
    monkeypatch.setattr(sft_data.RowStream, "batch", lambda self, rows, pad: (seen_rows.append(list(rows)),
                                                                              batch(self, rows, pad))[1])
    log_step = training_run.RunLogger.log_step

    def crash_after_logging_step_3(self, step, postfix, **values):
        log_step(self, step, postfix, **values)
        if step == 3:  # step 3 is logged, not saved (every 2 steps): the checkpoint holds step 2
            raise KeyboardInterrupt

    monkeypatch.setattr(training_run.RunLogger, "log_step", crash_after_logging_step_3)
    assert run_recipe(folder, work, "--until", "pretrain") == 130
    monkeypatch.setattr(training_run.RunLogger, "log_step", log_step)
    progress = json.loads((folder / "progress.json").read_text())["stages"]
    assert progress["tokenizer"]["status"] == "done"
    assert (progress["pretrain"]["status"], progress["pretrain"]["steps_done"]) == ("interrupted", 2)
    # A fresh machine: it has the data and got the interrupted stage's checkpoint (with its stage.json) back, but
    # not the optimizer's state, nor the finished tokenizer stage's folder.
    for path in work.iterdir():
        if path.name not in ("data", "pretrain"):
            shutil.rmtree(path)
    for path in (work / "pretrain").iterdir():
        if path.name not in ("checkpoint", "stage.json"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    seen_rows.clear()

    assert run_recipe(folder, work) == 0
    progress = json.loads((folder / "progress.json").read_text())["stages"]
    assert {name: record["status"] for name, record in progress.items()} == dict.fromkeys(
        ["tokenizer", "pretrain", "sft", "sft-v2", "rl-infill", "rl-e2e"], "done")
    pretrain = progress["pretrain"]
    assert [(run["from"], run["steps"], run["ended"]) for run in pretrain["runs"]] == [
        ("fresh", [0, 2], "interrupted"), ("weights", [2, 4], "done")]
    assert (pretrain["steps_done"], pretrain["steps_planned"], pretrain["rows_consumed"]) == (4, 4, 8)
    assert "eval_loss" in pretrain["heldout"]["trainer"]
    # The continuation trained on stream rows 4-7 (steps 3 and 4 of 2 rows), then scored the held-out rows.
    assert seen_rows[:2] == [[4, 5], [6, 7]]
    assert {"eval_correct_rate", "eval_compile_rate"} <= set(progress["rl-e2e"]["heldout"]["trainer"])
    for name, stage in (("rl-infill", "infill"), ("rl-e2e", "e2e")):
        [state] = (work / name / "state").glob("step-*")
        assert json.loads((state / "trainer_state.json").read_text())["config"]["stage"] == stage
    assert not (work / "tokenizer").exists()  # done on the first machine; pretrain's checkpoint has its tokenizer
    for name, record in progress.items():
        if name != "tokenizer":
            assert record["checkpoint_sha256"] == checkpoint_sha256(work / name / "checkpoint")
        assert record["steps_done"] == record["steps_planned"]
    model, tokenizer = load(work / "rl-e2e" / "checkpoint")
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.block_size) == (2, 64, 4)
    assert tokenizer.vocab_size <= 512
    table = (folder / "PROGRESS.md").read_text()
    assert all(f"| {name} | done | " in table for name in progress)

    # Everything finished: a second run trains nothing.
    assert run_recipe(folder, work) == 0
    again = json.loads((folder / "progress.json").read_text())["stages"]
    assert [len(r["runs"]) for r in again.values()] == [len(r["runs"]) for r in progress.values()]


def test_a_stage_stopped_by_the_time_limit_is_continued_by_the_next_run(toy, monkeypatch):
    folder, work = toy
    with monkeypatch.context() as patch:
        patch.setattr(training_run.PreparedRun, "past_deadline", lambda self: self.deadline is not None)
        assert run_recipe(folder, work, "--until", "pretrain", "--max-minutes", "60") == 4
    pretrain = json.loads((folder / "progress.json").read_text())["stages"]["pretrain"]
    assert (pretrain["status"], pretrain["steps_done"], pretrain["rows_consumed"]) == ("stopped", 1, 2)
    assert run_recipe(folder, work, "--until", "pretrain") == 0
    pretrain = json.loads((folder / "progress.json").read_text())["stages"]["pretrain"]
    assert [(run["from"], run["steps"], run["ended"]) for run in pretrain["runs"]] == [
        ("fresh", [0, 1], "stopped"), ("state", [1, 4], "done")]


def test_no_stage_starts_without_the_time_it_needs(toy, monkeypatch, capsys):
    folder, work = toy
    monkeypatch.setattr(recipe_module, "MIN_STAGE_MINUTES", 10.0)
    assert run_recipe(folder, work, "--max-minutes", "5") == 4
    assert "out of time before tokenizer" in capsys.readouterr().err and not (work / "tokenizer").exists()


def test_held_out_scores_measured_outside_training_are_logged(toy):
    folder, _ = toy
    recipe_module.record_heldout_scores(folder, "sft", "model_eval (compile-only)", {"cuke_heldout.compile_rate": 0.25})
    record = json.loads((folder / "progress.json").read_text())["stages"]["sft"]
    assert record["heldout"] == {"model_eval (compile-only)": {"cuke_heldout.compile_rate": 0.25}}
    assert "model_eval (compile-only): cuke_heldout.compile_rate 0.25" in (folder / "PROGRESS.md").read_text()


def test_missing_data_is_made_by_its_recipe_command(tmp_path):
    folder, work = copy_recipe(tmp_path), tmp_path / "work"
    text = (folder / "recipe.toml").read_text()
    made_by = 'made_by = "python3 -c \\"import pathlib; pathlib.Path(\'{data}/cuke/sft.jsonl\').write_text(\'\')\\""'
    text = re.sub(r'(\[data\.cuke_sft\]\npath = "cuke/sft.jsonl"\nsha256 = ""\n)made_by = .*', lambda m: m[1] + made_by,
                  text)
    (folder / "recipe.toml").write_text(text)
    write_toy_data(work / "data")
    (work / "data" / "cuke" / "sft.jsonl").unlink()  # the one file missing: only its command runs
    recipe = load_recipe(folder)
    recipe_module.make_missing_data(recipe, work / "data", recipe.selected(None, "sft-v2"))
    assert not (work / "data" / "cuke" / "sft.jsonl").exists()  # a file sft-v2 does not read is left alone
    recipe_module.make_missing_data(recipe, work / "data", recipe.selected("sft", None))
    assert (work / "data" / "cuke" / "sft.jsonl").read_text() == ""


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_the_recipe_runs_whole_on_a_gpu_with_the_correct_reward(toy):
    """The same toy run on the GPU: bf16 autocast, flex attention and compiled layers for training, the engine's
    CUDA graphs for rollouts, the strict validator's correct reward, bf16 checkpoints."""
    folder, work = toy
    on_gpu = []
    for stage, values in TOY_SETTINGS.items():
        for key, value in values.items():
            if key == "reward":
                value = '"correct"'
            elif key in QUIET and key not in ("tensorboard", "progress_bar"):
                continue  # the stage's own settings: bf16, compiled, bf16 checkpoints
            on_gpu += ["--set", f"{stage}.{key}={value}"]
    assert main(["train", "recipe", str(folder), "--work", str(work), "--set", "shape=toy", *on_gpu]) == 0
    progress = json.loads((folder / "progress.json").read_text())["stages"]
    assert all(record["status"] == "done" and record["runs"][-1]["device"] != "cpu" for record in progress.values())
    model, _ = load(work / "rl-e2e" / "checkpoint")
    assert model.config.torch_dtype == "bfloat16"


def test_data_that_differs_from_its_pin_stops_the_run_before_any_stage_starts(toy, capsys):
    folder, work = toy
    write_jsonl(work / "data" / "cuke-v2" / "e2e_tasks.jsonl", [{"id": "other", "pytorch_code": REFERENCE}])
    assert run_recipe(folder, work) == 2
    err = capsys.readouterr().err
    assert "data file cuke_v2_e2e" in err and "it is not the file the recipe trains on" in err
    assert not (work / "tokenizer").exists()


def test_a_missing_or_unpinned_data_file_is_an_actionable_error(tmp_path, capsys):
    folder, work = copy_recipe(tmp_path), tmp_path / "work"
    assert run_recipe(folder, work, "--only", "tokenizer") == 2
    err = capsys.readouterr().err
    assert "data file corpus_train" in err and "is missing; make it with: dice-copilot train corpus build" in err
    write_toy_data(work / "data")
    assert run_recipe(folder, work, "--only", "tokenizer") == 2
    assert "pin the files you mean to train on with --pin-data" in capsys.readouterr().err


def test_pinning_fills_empty_pins_and_never_replaces_one(toy, capsys):
    folder, work = toy
    text = (folder / "recipe.toml").read_text()
    sha = file_sha256(work / "data" / "cuke" / "sft.jsonl")
    assert re.search(rf'\[data\.cuke_sft\]\npath = "cuke/sft.jsonl"\nsha256 = "{sha}"', text)
    write_jsonl(work / "data" / "cuke" / "sft.jsonl", records(["relu"]))
    assert main(["train", "recipe", str(folder), "--work", str(work), "--pin-data"]) == 2
    assert "pinning never replaces a pin" in capsys.readouterr().err
    assert (folder / "recipe.toml").read_text() == text


def test_a_stage_made_from_other_inputs_is_neither_skipped_nor_continued(toy, capsys):
    folder, work = toy
    assert run_recipe(folder, work, "--until", "tokenizer") == 0
    # Another vocabulary makes another tokenizer: the finished one no longer counts.
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(text.replace("vocab_size = 512", "vocab_size = 448"))
    assert run_recipe(folder, work, "--until", "tokenizer") == 2
    assert "--restart tokenizer" in capsys.readouterr().err
    assert run_recipe(folder, work, "--until", "tokenizer", "--restart", "tokenizer") == 0


def test_a_stage_that_starts_from_a_checkpoint_not_on_this_machine_says_to_carry_it(toy, capsys):
    folder, work = toy
    assert run_recipe(folder, work, "--until", "tokenizer") == 0
    tokenizer = work / "tokenizer" / "checkpoint"
    shutil.move(tokenizer, work / "elsewhere")
    assert run_recipe(folder, work, "--until", "pretrain") == 2
    assert f"stage pretrain starts from {tokenizer}" in capsys.readouterr().err
    # Another folder in its place is not the finished stage's checkpoint.
    shutil.copytree(work / "elsewhere", tokenizer)
    (tokenizer / "merges.txt").write_text("#version: 0.2\n")
    assert run_recipe(folder, work, "--until", "pretrain") == 2
    assert "is not the checkpoint progress.json records for the finished stage tokenizer" in capsys.readouterr().err


def test_recipe_errors_are_reported_before_any_stage_runs(toy, capsys):
    folder, work = toy
    assert run_recipe(folder, work, "--set", "pretrain.no_such_field=1") == 2
    assert "unknown SFT config key(s) ['no_such_field']" in capsys.readouterr().err
    assert run_recipe(folder, work, "--set", "shape=d12-w384-v8k-b4", "--set", "shape=missing") == 2
    assert "shape 'missing' is not one of the recipe's shapes" in capsys.readouterr().err
    (folder / "pretrain.toml").write_text((folder / "pretrain.toml").read_text() + 'output_dir = "elsewhere"\n')
    assert run_recipe(folder, work) == 2
    assert "which the recipe wires" in capsys.readouterr().err
    assert not (work / "tokenizer").exists()


def test_the_tokenizer_reads_an_even_sample_of_a_file_over_its_limit(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"{i:09d}"} for i in range(10)])  # 10 chars each
    short = tmp_path / "short.cu"
    short.write_text(kernel_source("relu"))
    texts = list(recipe_module._corpus_texts([corpus, short], max_chars_per_file=35))
    assert texts == ["000000000", "000000003", "000000006", "000000009", kernel_source("relu")]
    assert len(list(recipe_module._corpus_texts([corpus], None))) == len(list(recipe_module._corpus_texts([corpus],
                                                                                                       10**6)))


def test_the_shipped_recipe_fits_the_size_limits_and_names_its_cuke_data():
    recipe = load_recipe(SHIPPED)
    assert [s.name for s in recipe.stages] == ["tokenizer", "pretrain", "sft", "sft-v2", "rl-infill", "rl-e2e"]
    for shape in recipe.shapes:
        size, largest = recipe.export_bytes(shape)
        assert size <= recipe.max_checkpoint_bytes and largest <= recipe.max_file_bytes, shape
    assert all(re.fullmatch("[0-9a-f]{64}", recipe.data[name].sha256)
               for name in ("cuke_sft", "cuke_infill", "cuke_v2_sft", "cuke_v2_infill", "cuke_v2_e2e",
                            "cuke_heldout"))
    seeds = [recipe.stage(name).values["seed"] for name in ("pretrain", "sft", "sft-v2", "rl-infill", "rl-e2e")]
    assert len(set(seeds)) == len(seeds)


# --- shipping a finished stage's checkpoint (--ship) -------------------------------------------------------------

# Small weight files for the toy model (about 210 KB in bf16), so that the shipped checkpoint is sharded.
TOY_MAX_FILE_BYTES = recipe_ship.HEADER_ROOM + 100_000


@pytest.fixture(scope="module")
def finished_toy(tmp_path_factory):
    """The toy recipe run whole once, with files of at most TOY_MAX_FILE_BYTES (the recipe's own shape, which
    bench/model_eval.py --record loads the recipe with, is then too large: the toy shape is the file's); the --ship
    tests copy it."""
    root = tmp_path_factory.mktemp("finished")
    folder, work = copy_recipe(root), root / "work"
    text = (folder / "recipe.toml").read_text()
    text = re.sub(r'^shape = ".*"', 'shape = "toy"', text, count=1, flags=re.M)
    (folder / "recipe.toml").write_text(text.replace("max_file_bytes = 16_000_000",
                                                     f"max_file_bytes = {TOY_MAX_FILE_BYTES}"))
    write_toy_data(work / "data")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the single_torch_thread fixture, which a module-wide fixture cannot use
    try:
        assert run_recipe(folder, work, "--pin-data") == 0
        assert run_recipe(folder, work) == 0
    finally:
        torch.set_num_threads(threads)
    return folder, work


@pytest.fixture
def finished(finished_toy, tmp_path):
    return tuple(Path(shutil.copytree(path, tmp_path / path.name)) for path in finished_toy)


def record_scores(folder: Path, stage: str, correct_rate: float, compile_rate: float, problems: int = 1) -> None:
    """Held-out scores of a stage as bench/model_eval.py --record writes them after a run on a GPU."""
    spec = importlib.util.spec_from_file_location("model_eval", REPO / "bench" / "model_eval.py")
    model_eval = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = model_eval  # its dataclasses look their module up
    spec.loader.exec_module(model_eval)
    scores = {"problems": problems, "compile_rate": compile_rate, "correct_rate": correct_rate, "fast_1": 0.0,
              "best_of_n": correct_rate, "tokens_per_forward": 1.5}
    model_eval.record_in_recipe(f"{folder}:{stage}", {"mode": "full", "columns": {"ours": {"scores": {
        "cuke_heldout": scores}}}})


def ship(folder: Path, work: Path, *extra: str) -> int:
    return run_recipe(folder, work, "--ship", *extra)


def test_ship_writes_the_last_finished_stage_as_a_bf16_checkpoint_with_its_model_card(finished, tmp_path, capsys):
    folder, work = finished
    record_scores(folder, "rl-e2e", correct_rate=0.25, compile_rate=0.5)
    # The decoding defaults model_eval --write-defaults chose: the stage stays the same finished checkpoint.
    write_decoding_defaults(work / "rl-e2e" / "checkpoint", {"strategy": "dynamic", "threshold": 0.8})
    assert run_recipe(folder, work) == 0
    dest = tmp_path / "shipped"
    assert ship(folder, work, str(dest)) == 0
    assert "shipped stage rl-e2e" in capsys.readouterr().out

    model, tokenizer = load(dest)
    assert not model.config.untrained and model.config.torch_dtype == "bfloat16"
    assert "dice_copilot_untrained" not in json.loads((dest / "config.json").read_text())
    trained, _ = load(work / "rl-e2e" / "checkpoint")
    assert all(torch.equal(a.to(torch.bfloat16), b) for a, b in zip(trained.state_dict().values(),
                                                                   model.state_dict().values()))
    assert read_decoding_defaults(dest) == {"strategy": "dynamic", "threshold": 0.8}
    weights = sorted(dest.glob("*.safetensors"))
    assert len(weights) > 1 and (dest / "model.safetensors.index.json").is_file()
    assert all(p.stat().st_size <= TOY_MAX_FILE_BYTES for p in weights)
    assert sum(p.stat().st_size for p in weights) <= 48_000_000
    for path in weights:
        with safe_open(str(path), framework="pt") as weights_file:
            assert {weights_file.get_slice(name).get_dtype() for name in weights_file.keys()} == {"BF16"}
    assert not (dest / "training_position.json").exists()

    metadata = model_card_metadata(dest)
    progress = json.loads((folder / "progress.json").read_text())["stages"]
    assert metadata["dice_copilot_heldout"]["scores"] == progress["rl-e2e"]["heldout"]["model_eval (full)"]
    assert metadata["dice_copilot_heldout"]["checkpoint_sha256"] == progress["rl-e2e"]["checkpoint_sha256"]
    card = (dest / "README.md").read_text()
    recipe = load_recipe(folder, ["shape=toy"])
    for name, record in progress.items():
        assert f"| {name} | {recipe.stage(name).kind} | " in card
        assert f"| {record['steps_done']}/{record['steps_planned']} | {record['rows_consumed']:,} |" in card
    assert all(f"`{entry.sha256}`" in card for entry in recipe.data.values())
    assert f"| parameters | {model.config.num_parameters:,} |" in card and "| cuke_heldout.correct_rate | 0.25 |" in card
    assert "KernelBench was never used" in card and "diceCopilot.checkpoint" in card and "`threshold`: 0.8" in card
    assert not model_card_says_untrained(dest)


def test_ship_replaces_only_a_checkpoint_its_scores_beat(finished, tmp_path, capsys):
    folder, work = finished
    dest = tmp_path / "shipped"
    record_scores(folder, "rl-e2e", correct_rate=0.25, compile_rate=0.5)
    assert ship(folder, work, str(dest)) == 0
    card = (dest / "README.md").read_text()
    for worse in [(0.25, 0.5), (0.25, 0.4), (0.2, 0.9)]:  # equal, a lower compile rate, a lower correct rate
        record_scores(folder, "rl-e2e", *worse)
        assert ship(folder, work, str(dest)) == 2
        err = capsys.readouterr().err
        assert "does not beat the checkpoint" in err and "--force" in err
        assert (dest / "README.md").read_text() == card
    assert ship(folder, work, str(dest), "--force") == 0
    assert model_card_metadata(dest)["dice_copilot_heldout"]["scores"]["cuke_heldout.correct_rate"] == 0.2
    record_scores(folder, "rl-e2e", 0.2, 0.95)  # an equal correct rate, a higher compile rate
    assert ship(folder, work, str(dest)) == 0
    # Better scores, but of another number of problems (a --limit run): they do not compare.
    shipped = (dest / "README.md").read_text()
    record_scores(folder, "rl-e2e", 0.5, 0.9, problems=2)
    assert ship(folder, work, str(dest)) == 2
    assert "scored on 2 CuKe held-out problems" in capsys.readouterr().err
    assert (dest / "README.md").read_text() == shipped

    # A trained checkpoint whose card records no scores cannot be compared.
    (dest / "README.md").write_text("# some trained model\n")
    record_scores(folder, "rl-e2e", 0.9, 1.0)
    assert ship(folder, work, str(dest)) == 2
    assert "records no held-out scores" in capsys.readouterr().err


def test_ship_replaces_the_untrained_embedded_default_by_default(finished, tmp_path, monkeypatch):
    folder, work = finished
    default = Path(shutil.copytree(UNTRAINED_CHECKPOINT, tmp_path / "default_checkpoint"))  # as it was shipped
    monkeypatch.setattr(checkpoint_module, "DEFAULT_CHECKPOINT_DIR", default)
    record_scores(folder, "rl-e2e", correct_rate=0.0, compile_rate=0.1)
    assert ship(folder, work) == 0
    model, _ = load(default)
    assert not model.config.untrained and model.config.hidden_size == 64 and not (default / "build_info.json").exists()


def test_a_stage_starts_from_the_shipped_default_when_that_is_its_source_stages_checkpoint(finished, tmp_path,
                                                                                             monkeypatch, capsys):
    folder, work = finished
    default = Path(shutil.copytree(UNTRAINED_CHECKPOINT, tmp_path / "default_checkpoint"))
    monkeypatch.setattr(checkpoint_module, "DEFAULT_CHECKPOINT_DIR", default)
    record_scores(folder, "sft", correct_rate=0.0, compile_rate=0.1)
    assert ship(folder, work, "--stage", "sft") == 0
    shutil.rmtree(work / "sft")  # a fresh GPU machine: the shipped sft weights only, inside the tree
    capsys.readouterr()
    assert run_recipe(folder, work, "--only", "sft-v2", "--restart", "sft-v2") == 0
    assert "sft-v2 starts from the embedded default checkpoint, which is stage sft's" in capsys.readouterr().err
    # The shipped checkpoint is another stage's (pretrain's record is not the card's): carry the right one.
    shutil.rmtree(work / "pretrain")
    assert run_recipe(folder, work, "--only", "sft", "--restart", "sft") == 2
    assert f"stage sft starts from {work / 'pretrain' / 'checkpoint'}" in capsys.readouterr().err


def test_ship_refuses_a_stage_that_is_not_finished_or_has_no_scores(toy, capsys):
    folder, work = toy
    assert ship(folder, work, str(work / "out")) == 2
    assert "no stage that trains a model is finished" in capsys.readouterr().err
    assert run_recipe(folder, work, "--until", "sft") == 0
    assert ship(folder, work, str(work / "out"), "--stage", "rl-e2e") == 2
    assert "stage rl-e2e is not finished (pending, step 0 of 1" in capsys.readouterr().err
    assert ship(folder, work, str(work / "out"), "--stage", "tokenizer") == 2
    assert "makes a tokenizer, not a model" in capsys.readouterr().err
    assert ship(folder, work, str(work / "out")) == 2  # the last finished stage: sft, with no scores
    err = capsys.readouterr().err
    assert "no held-out scores to ship stage sft by" in err and f"--record {folder}:sft" in err
    recipe_module.record_heldout_scores(folder, "sft", "model_eval (compile-only)", {"cuke_heldout.compile_rate": 0.5})
    assert ship(folder, work, str(work / "out")) == 2
    assert "holds model_eval (compile-only) only" in capsys.readouterr().err
    record_scores(folder, "sft", correct_rate=0.1, compile_rate=0.5)
    shutil.move(work / "sft" / "checkpoint", work / "elsewhere")
    assert ship(folder, work, str(work / "out")) == 2
    assert "the checkpoint of the finished stage sft is not on this machine" in capsys.readouterr().err
    shutil.move(work / "elsewhere", work / "sft" / "checkpoint")
    assert ship(folder, work, str(work / "out")) == 0
    assert not load(work / "out")[0].config.untrained


def test_ship_never_replaces_a_folder_that_is_not_a_checkpoint(finished, tmp_path, capsys):
    folder, work = finished
    record_scores(folder, "rl-e2e", correct_rate=0.25, compile_rate=0.5)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    for force in ([], ["--force"]):
        assert ship(folder, work, str(notes), *force) == 2
        assert "is not a checkpoint folder" in capsys.readouterr().err
        assert [p.name for p in notes.iterdir()] == ["todo.txt"]
    assert run_recipe(folder, work, "--ship", str(notes), "--until", "sft") == 2
    assert "--ship runs no stage" in capsys.readouterr().err
    assert run_recipe(folder, work, "--force") == 2
    assert "--stage and --force go with --ship" in capsys.readouterr().err


# --- the trainers' weights-only continuations ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def rows_read(monkeypatch) -> list[list[int]]:
    """The stream rows each training micro-batch reads (held-out rows are not in the stream)."""
    seen = []
    batch = sft_data.RowStream.batch
    monkeypatch.setattr(sft_data.RowStream, "batch", lambda self, rows, pad: (seen.append(list(rows)),
                                                                              batch(self, rows, pad))[1])
    return seen


def test_an_sft_continuation_from_weights_reads_the_rows_an_uninterrupted_run_reads_next(tmp_path, tokenizer_dir,
                                                                                        monkeypatch):
    data = write_jsonl(tmp_path / "kernels.jsonl", records())
    seen = rows_read(monkeypatch)
    settings = dict(max_steps=6, per_device_batch_size=2, packing=False, save_every_steps=3)
    straight = train_sft(tiny_sft_config(tmp_path / "a", data, tokenizer_dir, **settings))
    straight_rows = list(seen)
    seen.clear()

    first = train_sft(tiny_sft_config(tmp_path / "b", data, tokenizer_dir, **{**settings, "max_steps": 3}))
    position = json.loads((first.checkpoint_dir / training_run.POSITION_FILE).read_text())
    assert position == {"step": 3, "rows_consumed": 6}
    continued = train_sft(tiny_sft_config(
        tmp_path / "c", data, tokenizer_dir, **settings, init_weights=str(first.checkpoint_dir),
        start_step=position["step"], data_offset_rows=position["rows_consumed"], resume_warmup_steps=2))
    assert seen == straight_rows
    assert [s for s, _ in continued.losses] == [4, 5, 6] and continued.rows_consumed == straight.rows_consumed == 12
    # The first continued step starts from the same weights on the same rows and noise: the same loss.
    assert continued.losses[0][1] == pytest.approx(straight.losses[3][1], rel=1e-5)


def test_an_sft_continuation_with_another_batch_size_skips_and_repeats_no_row(tmp_path, tokenizer_dir, monkeypatch):
    data = write_jsonl(tmp_path / "kernels.jsonl", records())
    first = train_sft(tiny_sft_config(tmp_path / "a", data, tokenizer_dir, max_steps=2, per_device_batch_size=3,
                                      packing=False))
    seen = rows_read(monkeypatch)
    continued = train_sft(tiny_sft_config(tmp_path / "b", data, tokenizer_dir, max_steps=4, per_device_batch_size=2,
                                          packing=False, init_weights=str(first.checkpoint_dir), start_step=2,
                                          data_offset_rows=first.rows_consumed))
    assert seen == [[6, 7], [8, 9]] and continued.rows_consumed == 10


def test_a_continuation_ramps_its_fresh_optimizer_up_and_a_run_from_step_0_is_left_alone():
    assert [training_run.continuation_warmup(s, 3, 2) for s in (3, 4, 5, 6)] == pytest.approx([1 / 3, 2 / 3, 1, 1])
    assert training_run.continuation_warmup(5, 0, 2) == 1.0


def test_init_weights_of_another_shape_is_a_config_error(tmp_path, tokenizer_dir):
    data = write_jsonl(tmp_path / "kernels.jsonl", records())
    first = train_sft(tiny_sft_config(tmp_path / "a", data, tokenizer_dir, max_steps=1))
    wider = tiny_sft_config(tmp_path / "b", data, tokenizer_dir, max_steps=2, init_weights=str(first.checkpoint_dir),
                            start_step=1, model_overrides={"hidden_size": 96})
    with pytest.raises(ValueError, match="cannot start this run's model"):
        train_sft(wider)


def test_max_minutes_stops_a_run_after_a_step_with_what_resumes_it(tmp_path, tokenizer_dir):
    data = write_jsonl(tmp_path / "kernels.jsonl", records())
    config = tiny_sft_config(tmp_path, data, tokenizer_dir, max_steps=4, per_device_batch_size=2, packing=False)
    stopped = train_sft(config.replace(max_minutes=1e-9))
    assert (stopped.steps, stopped.planned_steps, stopped.rows_consumed) == (1, 4, 2)
    assert training_run.latest_state(Path(config.output_dir)).name == "step-1"
    resumed = train_sft(config)
    assert [s for s, _ in resumed.losses] == [1, 2, 3, 4] and resumed.rows_consumed == 8


def test_an_rl_continuation_from_weights_takes_the_tasks_an_uninterrupted_run_takes_next(tmp_path, tokenizer_dir):
    taken = []

    def reward(tasks, completions):
        taken.append([t.id for t in tasks[::2]])  # one id per group of 2
        return [Reward(float(text[:1] == " ")) for text in completions]

    def run(config):
        model, tokenizer = build_model_and_tokenizer(config)
        return run_rl(config, model, tokenizer, short_tasks()[:3], reward)

    settings = dict(rl_steps=4, tasks_per_step=2, group_size=2, save_every_steps=2)
    straight = run(tiny_rl_config(tmp_path / "a", tokenizer_dir, **settings))
    straight_tasks = list(taken)
    taken.clear()
    first = run(tiny_rl_config(tmp_path / "b", tokenizer_dir, **{**settings, "rl_steps": 2}))
    position = json.loads((first.checkpoint_dir / training_run.POSITION_FILE).read_text())
    continued = run(tiny_rl_config(tmp_path / "c", tokenizer_dir, **settings, init_weights=str(first.checkpoint_dir),
                                   start_step=position["step"], data_offset_rows=position["rows_consumed"]))
    assert taken == straight_tasks == [["t0", "t1"], ["t2", "t0"], ["t1", "t2"], ["t0", "t1"]]
    assert [h["step"] for h in continued.history] == [3, 4] and continued.rows_consumed == straight.rows_consumed == 8


def test_a_weights_only_continuation_starts_from_the_saved_weights(tmp_path, tokenizer_dir):
    data = write_jsonl(tmp_path / "kernels.jsonl", records())
    first = train_sft(tiny_sft_config(tmp_path / "a", data, tokenizer_dir, max_steps=1))
    config = tiny_sft_config(tmp_path / "b", data, tokenizer_dir, max_steps=2, init_weights=str(first.checkpoint_dir),
                             start_step=1)
    model, _ = build_model_and_tokenizer(config)
    training_run.load_initial_weights(model, config)
    saved, _ = load(first.checkpoint_dir, dtype=torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), saved.state_dict().values()))


def test_recipe_help_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from dice_copilot.cli import main\n"
            "try: main(['train', 'recipe', '--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().endswith("False"), done.stderr
    assert recipe_module.EXIT_OUT_OF_TIME == 4


def test_the_card_says_when_its_scores_are_of_part_of_the_held_out_set():
    from dice_copilot.trainer.recipe_ship import _coverage, _misses

    part = _coverage({"cuke_heldout.problems": 32}, 453)
    assert "first 32 of 453 problems" in part and "easiest" in part
    assert _coverage({"cuke_heldout.problems": 453}, 453) == ", 453 problems"
    misses = _misses({"cuke_heldout.problems": 32, "cuke_heldout.correct_rate": 0.75, "user_style.problems": 40,
                      "user_style.correct_rate": 0.0})
    assert "cuke_heldout set (32 problems measured) 25.0%" in misses
    assert "user_style set (40 problems measured) 100.0%" in misses
