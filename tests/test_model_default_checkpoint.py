"""The embedded default checkpoint is the trained dice-tiny model with its model card; the untrained stand-in the tests
decode with says it is untrained and rebuilds deterministically."""

import json
import shutil

import pytest
from checkpoint_helpers import UNTRAINED_CHECKPOINT

from dice_copilot.model import load
from dice_copilot.model.build_untrained_checkpoint import build
from dice_copilot.model.checkpoint import CHECKPOINT_ENV, DEFAULT_CHECKPOINT_DIR, model_card_metadata
from dice_copilot.model.prompts import end_to_end_prompt, example_model


@pytest.fixture
def no_checkpoint_named(monkeypatch):
    """As a user's shell is: no DICE_COPILOT_CHECKPOINT (the test session sets it to the stand-in)."""
    monkeypatch.delenv(CHECKPOINT_ENV)


@pytest.mark.parametrize("name", [None, "default"])
def test_the_default_checkpoint_is_trained_and_its_card_records_the_held_out_scores_it_was_shipped_by(
        name, no_checkpoint_named):
    model, tokenizer = load(name)
    assert model.config.untrained is False
    assert "dice_copilot_untrained" not in json.loads((DEFAULT_CHECKPOINT_DIR / "config.json").read_text())
    assert tokenizer.mask_token_id == model.config.mask_token_id == tokenizer.token_to_id("<|MASK|>")
    assert tokenizer.vocab_size <= model.config.vocab_size
    assert tokenizer.token_to_id("<|im_end|>") in tokenizer.stop_token_ids
    shipped_by = model_card_metadata(DEFAULT_CHECKPOINT_DIR)["dice_copilot_heldout"]
    assert shipped_by["recipe"] == "dice-tiny" and shipped_by["source"] == "model_eval (full)"
    assert 0 < shipped_by["scores"]["cuke_heldout.correct_rate"] <= 1


def test_the_default_checkpoint_fits_the_size_limits_of_the_repository():
    weights = list(DEFAULT_CHECKPOINT_DIR.glob("*.safetensors"))
    assert weights and sum(p.stat().st_size for p in weights) <= 48_000_000
    assert all(p.stat().st_size <= 16_000_000 for p in DEFAULT_CHECKPOINT_DIR.iterdir())


def test_default_tokenizer_round_trips_a_dice_prompt_and_parses_chat_tokens(no_checkpoint_named):
    _, tokenizer = load()
    prompt = end_to_end_prompt(example_model())
    ids = tokenizer.encode(prompt)
    assert tokenizer.decode(ids) == prompt
    assert ids[0] == tokenizer.token_to_id("<|im_start|>")
    assert len(ids) < len(prompt) / 2  # the BPE learnt this text: far fewer tokens than bytes


def test_the_untrained_stand_in_is_marked_untrained_and_small():
    model, _ = load(UNTRAINED_CHECKPOINT)
    assert model.config.untrained is True
    assert sum(p.stat().st_size for p in UNTRAINED_CHECKPOINT.iterdir()) < 4_000_000


@pytest.mark.slow
def test_build_is_deterministic(tmp_path):
    first = build(tmp_path / "a", vocab_size=600, seed=3)
    second = build(tmp_path / "b", vocab_size=600, seed=3)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    model, _ = load(first)
    assert model.config.untrained and model.config.vocab_size <= 600


def test_building_the_stand_in_never_replaces_a_trained_checkpoint_unasked(tmp_path, capsys):
    from dice_copilot.model.build_untrained_checkpoint import main

    trained = tmp_path / "trained"
    shutil.copytree(UNTRAINED_CHECKPOINT, trained)
    config = json.loads((trained / "config.json").read_text())
    del config["dice_copilot_untrained"]
    (trained / "config.json").write_text(json.dumps(config))
    (trained / "README.md").write_text("# dice-tiny\n\nTrained by the recipe.\n")
    before = {p.name: p.read_bytes() for p in trained.iterdir()}
    assert main(["--out", str(trained)]) == 2
    error = capsys.readouterr().err
    assert "holds a trained checkpoint" in error and "--force" in error
    assert {p.name: p.read_bytes() for p in trained.iterdir()} == before
