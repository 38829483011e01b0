"""bench/data_probe.py on the CPU at toy size: each arm trains from scratch on its recipe data (files written here at
the recipe's paths) with the same seed and steps, a file that is not the one the recipe pins stops an arm, and the
eval scores both arms side by side (compile-only without a GPU)."""

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from rl_helpers import MIDDLE, PREFIX, REFERENCE, SUFFIX
from sft_helpers import records, write_jsonl

from dice_copilot.trainer.recipe import load_recipe, pin_data

REPO = Path(__file__).resolve().parents[1]
TOY = ["--set", "seq_len=192", "--set", "per_device_batch_size=2", "--set", "warmup_steps=1",
       "--set", "save_every_steps=1", "--set", "log_every_steps=1", "--set", 'mixed_precision="no"',
       "--set", "compile=false", "--set", "tensorboard=false", "--set", 'save_dtype="float32"',
       "--set", "model_overrides={num_hidden_layers = 1, hidden_size = 64, num_attention_heads = 4, "
                "num_key_value_heads = 2, head_dim = 16, intermediate_size = 128}"]


@pytest.fixture
def probe(monkeypatch):
    spec = importlib.util.spec_from_file_location("data_probe", REPO / "bench" / "data_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "data_probe", module)
    return module


@pytest.fixture
def toy_data(tmp_path):
    data = tmp_path / "data"
    task = {"pytorch_code": REFERENCE, "prefix": PREFIX, "suffix": SUFFIX}
    for version in ("cuke", "cuke-v2"):
        (data / version).mkdir(parents=True)
        write_jsonl(data / version / "sft.jsonl", records())
        write_jsonl(data / version / "infill_tasks.jsonl", [{"id": f"t{i}", **task, "middle": MIDDLE} for i in range(3)])
    write_jsonl(data / "cuke-v2" / "eval_heldout.jsonl", [{"id": "held", **task, "middle": ""}])
    return data


def recipe_pinned_to(tmp_path: Path, data: Path) -> Path:
    """The shipped recipe with its data pins cleared, then pinned to the toy files."""
    folder = tmp_path / "recipe"
    shutil.copytree(REPO / "trainer" / "recipes" / "dice-tiny", folder)
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(re.sub(r'^(sha256|manifest_sha256) = "[0-9a-f]+"', r'\1 = ""', text,
                                               flags=re.M))
    pin_data(load_recipe(folder), data)
    return folder


def test_an_arm_refuses_data_that_is_not_the_pinned_file(probe, toy_data, tmp_path, capsys):
    code = probe.main(["train", "v2", "--steps", "1", "--work", str(tmp_path / "work"), "--data", str(toy_data), *TOY])
    assert code == 2
    err = capsys.readouterr().err
    assert "data file cuke_v2_sft" in err and "it is not the file the recipe trains on" in err


def test_both_arms_train_alike_and_are_scored_side_by_side(probe, toy_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(probe, "RECIPE", recipe_pinned_to(tmp_path, toy_data))
    work, out = tmp_path / "work", tmp_path / "out" / "probe.json"
    common = ["--work", str(work), "--data", str(toy_data)]
    assert probe.main(["train", "v1", "--steps", "2", *common, *TOY]) == 0
    assert probe.main(["eval", "--limit", "1", "--out", str(out), *common]) == 2  # one arm is not trained yet
    assert "train both arms first" in capsys.readouterr().err
    assert probe.main(["train", "v2", "--steps", "2", *common, *TOY]) == 0
    arms = {arm: json.loads((work / arm / "probe.json").read_text()) for arm in ("v1", "v2")}
    assert arms["v1"]["steps"] == arms["v2"]["steps"] == 2
    assert arms["v1"]["stage_data"] == ["cuke_sft", "cuke_infill"]
    assert arms["v2"]["stage_data"] == ["cuke_v2_sft", "cuke_v2_infill"]
    assert probe.main(["eval", "--limit", "1", "--out", str(out), *common]) == 0
    result = json.loads(out.read_text())
    columns = result["model_eval"]["columns"]
    assert columns["ours"]["checkpoint"] == arms["v2"]["checkpoint"]
    assert columns["baseline"]["checkpoint"] == arms["v1"]["checkpoint"]
    assert columns["ours"]["decoding"] == columns["baseline"]["decoding"]
    assert set(columns["ours"]["scores"]) == {"cuke_heldout", "user_style"}
