"""`dice-copilot train recipe` on the CPU: the shipped dice-tiny recipe run whole at toy size (a tiny corpus and
CuKe-format files written here, a tiny shape, a few steps a stage, RL with the compile reward), an interrupted stage
continued from its weights alone, finished stages skipped, data checked by sha256; and the trainers' weights-only
continuations reading exactly the data an uninterrupted run reads next."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from rl_helpers import PREFIX, REFERENCE, SUFFIX, short_tasks, tiny_rl_config
from sft_helpers import kernel_source, make_tokenizer, records, tiny_sft_config, write_jsonl

from dice_copilot.cli import main
from dice_copilot.model import load
from dice_copilot.trainer import recipe as recipe_module
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
    write_jsonl(data / "cuke" / "sft.jsonl", records())
    task = {"pytorch_code": REFERENCE, "prefix": PREFIX, "suffix": SUFFIX}
    write_jsonl(data / "cuke" / "infill_tasks.jsonl", [{"id": f"add{i}", **task} for i in range(3)])
    write_jsonl(data / "cuke" / "e2e_tasks.jsonl", [{"id": f"add{i}", "pytorch_code": REFERENCE} for i in range(3)])
    write_jsonl(data / "cuke" / "eval_heldout.jsonl", [{"id": "held", **task, "middle": ""}])


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
        ["tokenizer", "pretrain", "sft", "rl-infill", "rl-e2e"], "done")
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
    recipe_module.make_missing_data(load_recipe(folder), work / "data")
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
    write_jsonl(work / "data" / "cuke" / "e2e_tasks.jsonl", [{"id": "other", "pytorch_code": REFERENCE}])
    assert run_recipe(folder, work) == 2
    err = capsys.readouterr().err
    assert "data file cuke_e2e" in err and "it is not the file the recipe trains on" in err
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
    assert [s.name for s in recipe.stages] == ["tokenizer", "pretrain", "sft", "rl-infill", "rl-e2e"]
    for shape in recipe.shapes:
        size, largest = recipe.export_bytes(shape)
        assert size <= recipe.max_checkpoint_bytes and largest <= recipe.max_file_bytes, shape
    assert all(re.fullmatch("[0-9a-f]{64}", recipe.data[name].sha256)
               for name in ("cuke_sft", "cuke_infill", "cuke_e2e", "cuke_heldout"))
    seeds = [recipe.stage(name).values["seed"] for name in ("pretrain", "sft", "rl-infill", "rl-e2e")]
    assert len(set(seeds)) == len(seeds)


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
