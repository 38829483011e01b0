"""The language server's decoding: each value the user's setting, else the loaded checkpoint's generation_config.json
default, else the built-in, as `generate` and the evals pick them; showStatus says which, and the engine gets it."""

import shutil
import threading

from checkpoint_helpers import UNTRAINED_CHECKPOINT

from dice_copilot.model.checkpoint import write_decoding_defaults
from dice_copilot.server import backend
from dice_copilot.server.server import server
from dice_copilot.server.settings import BUILT_IN_DECODING, ServerSettings, decoding_for, merge_settings

CHECKPOINT_DEFAULTS = {"strategy": "static", "threshold": 0.5, "num_return_sequences": 8, "max_new_tokens": 1000,
                       "temperature": 0.3, "top_k": 20, "top_p": 0.95, "steps_per_block": 2}


def test_unset_settings_take_the_checkpoint_defaults_and_a_set_one_wins():
    decoding = decoding_for(ServerSettings(), CHECKPOINT_DEFAULTS)
    assert (decoding.strategy, decoding.threshold, decoding.maxCandidates, decoding.kernelMaxNewTokens) == (
        "static", 0.5, 8, 1000)
    assert (decoding.temperature, decoding.topK, decoding.topP, decoding.stepsPerBlock) == (0.3, 20, 0.95, 2)
    # The checkpoint budgets a whole answer; the infill budget counts only the new code, so it stays built in.
    assert decoding.maxNewTokens == BUILT_IN_DECODING["maxNewTokens"] and decoding.sources["maxNewTokens"] == "default"

    settings, errors = merge_settings(ServerSettings(), {"diceCopilot": {"strategy": "sequential", "maxCandidates": 2,
                                                                         "maxNewTokens": 100}})
    assert errors == []
    decoding = decoding_for(settings, CHECKPOINT_DEFAULTS)
    assert (decoding.strategy, decoding.threshold, decoding.maxCandidates) == ("sequential", 0.5, 2)
    assert (decoding.maxNewTokens, decoding.kernelMaxNewTokens) == (100, 400)  # a whole kernel gets 4x
    assert decoding.sources == {"strategy": "setting", "threshold": "checkpoint", "maxCandidates": "setting",
                                "maxNewTokens": "setting", "kernelMaxNewTokens": "setting",
                                "temperature": "checkpoint", "topK": "checkpoint", "topP": "checkpoint",
                                "stepsPerBlock": "checkpoint"}

    # Without checkpoint defaults the built-ins apply.
    built_in = decoding_for(ServerSettings(), {})
    assert set(built_in.sources.values()) == {"default"}
    assert {name: getattr(built_in, name) for name in BUILT_IN_DECODING} == BUILT_IN_DECODING


def test_a_setting_set_to_the_default_value_still_wins_and_null_unsets_it():
    """VS Code sends every key, null for the decoding settings the user left unset (their contributed default)."""
    settings, errors = merge_settings(ServerSettings(), {"strategy": "dynamic", "threshold": 0.9})
    assert errors == [] and decoding_for(settings, CHECKPOINT_DEFAULTS).sources["strategy"] == "setting"
    assert decoding_for(settings, CHECKPOINT_DEFAULTS).strategy == "dynamic"
    settings, errors = merge_settings(settings, {"strategy": None, "threshold": None, "maxCandidates": None,
                                                 "maxNewTokens": None})
    assert errors == [] and settings == ServerSettings()
    assert decoding_for(settings, CHECKPOINT_DEFAULTS).strategy == "static"
    # A bad value keeps the old one and names the key; the type is checked although the setting was unset.
    settings, errors = merge_settings(settings, {"threshold": "high", "maxCandidates": 0})
    assert settings.threshold is None and settings.maxCandidates is None
    assert any("threshold must be a number" in error for error in errors) and len(errors) == 2


def test_the_loaded_checkpoint_brings_its_defaults_and_status_reports_each_source(tmp_path, monkeypatch):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(UNTRAINED_CHECKPOINT, checkpoint)
    write_decoding_defaults(checkpoint, {"strategy": "static", "num_return_sequences": 3})
    loaded = backend.load_model(str(checkpoint), "cpu")
    assert loaded.decoding_defaults == {"strategy": "static", "num_return_sequences": 3}
    assert backend.load_model("default", "cpu").decoding_defaults == {}

    monkeypatch.setattr(server.models, "loaded", loaded)
    monkeypatch.setattr(server, "settings", ServerSettings(maxCandidates=2))
    decoding = server.status_snapshot()["decoding"]
    assert decoding["strategy"] == {"value": "static", "source": "checkpoint"}
    assert decoding["maxCandidates"] == {"value": 2, "source": "setting"}
    assert decoding["threshold"] == {"value": BUILT_IN_DECODING["threshold"], "source": "default"}
    # Another checkpoint (a reload) is picked against afresh.
    monkeypatch.setattr(server.models, "loaded", backend.load_model("default", "cpu"))
    assert server.status_snapshot()["decoding"]["strategy"]["source"] == "default"
    monkeypatch.setattr(server.models, "loaded", None)
    assert server.status_snapshot()["decoding"] is None  # nothing to decode with yet


class RecordingEngine:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, **options):
        self.calls.append(options)
        return []


def test_the_engine_decodes_with_the_chosen_decoding():
    engine = RecordingEngine()
    loaded = backend.LoadedModel(engine, None, "ckpt", "id", "cpu", 0.0, decoding_defaults=CHECKPOINT_DEFAULTS)
    for count in (3, 1):
        decoding = decoding_for(ServerSettings(maxCandidates=count), loaded.decoding_defaults)
        backend.generate_texts(loaded, backend.GenerationRequest("kernel", "prompt", decoding, 64), threading.Event())
    several, one = engine.calls
    assert {key: several[key] for key in ("n", "strategy", "threshold", "max_new_tokens", "temperature", "top_k",
                                          "top_p", "steps_per_block")} == {
        "n": 3, "strategy": "static", "threshold": 0.5, "max_new_tokens": 64, "temperature": 0.3, "top_k": 20,
        "top_p": 0.95, "steps_per_block": 2}
    assert one["n"] == 1 and one["temperature"] == 0.0  # one candidate is greedy
