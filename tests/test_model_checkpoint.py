"""Checkpoint loading and saving: HF Qwen3 parity, the SDAR layout and its defaults, lm_head tying, untrained marks,
dtypes, corrupt folders, atomic save."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from dice_copilot.model import CheckpointError, load, save
from dice_copilot.model.config import QWEN3_CONFIG_DEFAULTS, DiceConfig
from dice_copilot.model.masks import causal_mask
from float_tolerance import forward_terms, half_forward_roundings, tolerance
from model_helpers import VOCAB_SIZE, hf_qwen3, positions, save_hf_checkpoint, save_sdar_layout

INPUT_IDS = torch.randint(0, VOCAB_SIZE, (2, 13), generator=torch.Generator().manual_seed(1))


def our_causal_logits(model):
    pos = positions(*INPUT_IDS.shape)
    with torch.no_grad():
        return model(INPUT_IDS, pos, attn_mask=causal_mask(pos)).float()


def hf_logits(hf_model):
    with torch.no_grad():
        return hf_model(input_ids=INPUT_IDS).logits.float()


def assert_matches_transformers(model, hf_model):
    """fp32 logits of two implementations of one network: equal up to how each orders its sums."""
    want = hf_logits(hf_model)
    terms = forward_terms(model.config, INPUT_IDS.shape[1])
    torch.testing.assert_close(our_causal_logits(model), want, **tolerance(torch.float32, terms, want.abs().max()))


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def hf_model(request):
    return hf_qwen3(tie=request.param)


@pytest.fixture(scope="module")
def hf_folder(hf_model, tmp_path_factory):
    return save_hf_checkpoint(hf_model, tmp_path_factory.mktemp("qwen3"))


def test_causal_mode_reproduces_transformers_qwen3_logits(hf_model, hf_folder):
    model, _ = load(hf_folder, dtype=torch.float32)
    assert model.config.tie_word_embeddings == hf_model.config.tie_word_embeddings
    assert_matches_transformers(model, hf_model)


def test_tied_model_shares_the_embedding(hf_model, hf_folder):
    model, _ = load(hf_folder)
    shared = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert shared == hf_model.config.tie_word_embeddings


def test_sdar_layout_sharded_loads_with_identical_logits(hf_model, tmp_path):
    folder = save_sdar_layout(hf_model, tmp_path / "sdar", shards=3, dtype=torch.float32)
    model, tokenizer = load(folder)
    assert model.config.block_size == 4 and model.config.mask_token_id == 3 == tokenizer.mask_token_id
    assert torch.equal(our_causal_logits(model), our_causal_logits(load(save_hf_checkpoint(hf_model, tmp_path / "hf"))[0]))
    assert_matches_transformers(model, hf_model)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_checkpoint_loads_in_its_dtype(hf_model, tmp_path, dtype):
    folder = save_sdar_layout(hf_model, tmp_path / "half", shards=2, dtype=dtype)
    model, _ = load(folder)
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert model.config.torch_dtype == {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    # fp32 on request, from the same half-precision files: the same weights, exactly.
    model32, _ = load(folder, dtype="fp32")
    assert {p.dtype for p in model32.parameters()} == {torch.float32}
    assert all(torch.equal(p32, p.float()) for p32, p in zip(model32.parameters(), model.parameters()))
    want = our_causal_logits(model32)
    close = tolerance(dtype, half_forward_roundings(model.config), want.abs().max(), computations=1)
    torch.testing.assert_close(our_causal_logits(model), want, **close)


def test_save_then_load_round_trip_in_sharded_sdar_layout(hf_folder, tmp_path):
    model, tokenizer = load(hf_folder)
    out = save(model, tokenizer, tmp_path / "saved", max_shard_bytes=40_000)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["architectures"] == ["SDARForCausalLM"]
    assert config["block_size"] == 4 and config["mask_token_id"] == model.config.mask_token_id
    assert (out / "generation_config.json").is_file() and (out / "tokenizer.json").is_file()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shard_files = set(index["weight_map"].values())
    assert len(shard_files) > 1 and all((out / f).is_file() for f in shard_files)
    assert ("lm_head.weight" in index["weight_map"]) == (not model.config.tie_word_embeddings)

    again, tokenizer_again = load(out)
    assert torch.equal(our_causal_logits(again), our_causal_logits(model))
    assert tokenizer_again.encode("<|im_start|>user\nx") == tokenizer.encode("<|im_start|>user\nx")


def test_save_replaces_an_existing_checkpoint_and_leaves_no_temporaries(hf_folder, tmp_path):
    model, tokenizer = load(hf_folder)
    target = tmp_path / "ckpt"
    save(model, tokenizer, target, max_shard_bytes=40_000)
    with torch.no_grad():
        model.model.norm.weight.fill_(2.0)
    save(model, tokenizer, target)  # single file now: the old shards must be gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert not (target / "model.safetensors.index.json").exists()
    assert torch.all(load(target)[0].model.norm.weight == 2.0)


def test_save_refuses_to_replace_a_folder_that_is_not_a_checkpoint(hf_folder, tmp_path):
    model, tokenizer = load(hf_folder)
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        save(model, tokenizer, precious)
    assert (precious / "thesis.tex").read_text() == "keep me"


# --- what config.json leaves out, and lm_head tying ---------------------------------------------------------------


def edit_config(folder, drop=(), **values):
    config = json.loads((folder / "config.json").read_text())
    config = {key: value for key, value in config.items() if key not in drop}
    (folder / "config.json").write_text(json.dumps({**config, **values}))


def test_missing_keys_mean_what_transformers_qwen3config_says():
    from transformers import Qwen3Config

    reference = Qwen3Config()
    rope_theta = getattr(reference, "rope_theta", None) or reference.rope_parameters["rope_theta"]
    assert QWEN3_CONFIG_DEFAULTS == {key: rope_theta if key == "rope_theta" else getattr(reference, key)
                                     for key in QWEN3_CONFIG_DEFAULTS}
    for model_type in ("sdar", "qwen3"):
        config = DiceConfig.from_hf_dict({"model_type": model_type, "num_attention_heads": 16,
                                          "num_key_value_heads": None})
        assert config.tie_word_embeddings is False and config.head_dim == 128 and config.rope_theta == 10000.0
        assert config.num_key_value_heads == 16  # null: one KV head per query head, as Qwen3Config reads it
    assert DiceConfig.from_hf_dict({"model_type": "dice"}) == DiceConfig()


def test_sdar_config_without_tie_and_head_dim_loads_untied_with_head_dim_128(tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    # head_dim is left at Qwen3's 128, which is not hidden_size / num_attention_heads (32).
    hf = Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      tie_word_embeddings=False, eos_token_id=0, pad_token_id=0)).eval()
    explicit = save_sdar_layout(hf, tmp_path / "explicit", shards=1, dtype=torch.float32)
    implicit = save_sdar_layout(hf, tmp_path / "implicit", shards=1, dtype=torch.float32)
    edit_config(implicit, drop=("tie_word_embeddings", "head_dim"))
    model, _ = load(implicit)
    assert model.config.head_dim == 128 and model.config.tie_word_embeddings is False
    assert torch.equal(model.lm_head.weight, hf.lm_head.weight)
    assert torch.equal(our_causal_logits(model), our_causal_logits(load(explicit)[0]))


def test_a_tied_config_never_drops_a_different_lm_head_from_the_files(sdar_folder):
    untied, _ = load(sdar_folder)
    edit_config(sdar_folder, tie_word_embeddings=True)
    with pytest.warns(UserWarning, match=r"tie_word_embeddings true.*lm_head\.weight that differs.*untied"):
        model, _ = load(sdar_folder)
    assert model.config.tie_word_embeddings is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, untied.lm_head.weight)
    assert torch.equal(our_causal_logits(model), our_causal_logits(untied))


def test_a_tied_config_shares_an_lm_head_equal_to_the_embedding(tmp_path, recwarn):
    hf = hf_qwen3(tie=False)
    with torch.no_grad():
        hf.lm_head.weight.copy_(hf.model.embed_tokens.weight)
    folder = save_sdar_layout(hf, tmp_path / "sdar", shards=2, dtype=torch.float32)
    edit_config(folder, tie_word_embeddings=True)
    model, _ = load(folder)
    assert model.config.tie_word_embeddings is True
    assert not [w for w in recwarn.list if "tie_word_embeddings" in str(w.message)]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("config_says", [dict(tie_word_embeddings=False), dict(drop=("tie_word_embeddings",))])
def test_an_untied_config_without_lm_head_in_the_files_says_how_to_fix_it(tmp_path, config_says):
    folder = save_sdar_layout(hf_qwen3(tie=True), tmp_path / "sdar", shards=2, dtype=torch.float32)
    edit_config(folder, **config_says)
    with pytest.raises(CheckpointError, match=r"hold no lm_head\.weight.*\"tie_word_embeddings\": true"):
        load(folder)


# --- untrained marks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("card, untrained", [
    (None, False),
    ("# DICE-tiny, untrained\n\nRandom weights for plumbing tests.\n", True),
    ("---\nlicense: apache-2.0\ntags:\n- dice\n- untrained\n---\n# DICE-tiny\n", True),
    ("---\ntags: untrained\n---\n", True),
    ("---\ntags: [dice, sft]\n---\n\n# DICE-tiny SFT\n\nFar better than the untrained baseline.\n", False),
    ("Notes first.\n\n# Untrained ablation\n", False),  # a heading further down is not the title
    ("---\n: not yaml [\n---\n# DICE-tiny\n", False),
], ids=["no card", "title", "tags", "one tag", "body mention", "later heading", "bad metadata"])
def test_the_model_card_can_mark_a_checkpoint_untrained(sdar_folder, card, untrained):
    if card is not None:
        (sdar_folder / "README.md").write_text(card)
    model, _ = load(sdar_folder)
    assert model.config.untrained is untrained


def test_config_json_marks_a_checkpoint_untrained_and_save_keeps_the_mark(sdar_folder, tmp_path):
    edit_config(sdar_folder, dice_copilot_untrained=True)
    model, tokenizer = load(sdar_folder)
    assert model.config.untrained is True
    saved = save(model, tokenizer, tmp_path / "copy")
    assert json.loads((saved / "config.json").read_text())["dice_copilot_untrained"] is True


# --- corrupt or incomplete folders ------------------------------------------------------------------------------


@pytest.fixture
def sdar_folder(tmp_path):
    return save_sdar_layout(hf_qwen3(tie=False), tmp_path / "sdar", shards=2, dtype=torch.float32)


def test_missing_config_names_the_file(sdar_folder):
    (sdar_folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json is missing"):
        load(sdar_folder)


def test_invalid_config_json_names_the_file(sdar_folder):
    (sdar_folder / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON"):
        load(sdar_folder)


def test_unknown_model_type_is_rejected(sdar_folder):
    config = json.loads((sdar_folder / "config.json").read_text())
    (sdar_folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(CheckpointError, match=r"config\.json.*llama"):
        load(sdar_folder)


def test_missing_shard_named_in_the_index(sdar_folder):
    (sdar_folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors is missing"):
        load(sdar_folder)


def test_truncated_safetensors_names_the_file(sdar_folder):
    shard = sdar_folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(CheckpointError, match=r"model-00001-of-00002\.safetensors is corrupt or truncated"):
        load(sdar_folder)


def test_missing_tensor_names_the_shard(sdar_folder):
    shard = sdar_folder / "model-00001-of-00002.safetensors"
    tensors = load_file(str(shard))
    dropped = sorted(tensors)[0]
    del tensors[dropped]
    save_file(tensors, str(shard))
    with pytest.raises(CheckpointError, match=rf"model-00001-of-00002\.safetensors lacks tensors .*{dropped}"):
        load(sdar_folder)


def test_missing_tensor_in_a_single_file_checkpoint(hf_folder, tmp_path):
    folder = shutil.copytree(hf_folder, tmp_path / "copy")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.norm.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors is incomplete.*model\.norm\.weight"):
        load(folder)


def test_shape_mismatch_names_the_tensor(sdar_folder):
    config = json.loads((sdar_folder / "config.json").read_text())
    (sdar_folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(CheckpointError, match=r"safetensors: tensor model\.layers\.\d\.mlp\.\w+_proj\.weight has shape"):
        load(sdar_folder)


def test_weights_of_another_architecture_are_rejected(sdar_folder):
    config = json.loads((sdar_folder / "config.json").read_text())
    (sdar_folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(CheckpointError, match=r"holds tensor model\.layers\.1\."):
        load(sdar_folder)


def test_missing_tokenizer_names_the_file(sdar_folder):
    (sdar_folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json is missing"):
        load(sdar_folder)


def test_missing_weights_and_missing_folder(sdar_folder, tmp_path):
    (sdar_folder / "model.safetensors.index.json").unlink()
    with pytest.raises(CheckpointError, match=r"has no weights"):
        load(sdar_folder)
    with pytest.raises(CheckpointError, match=r"does not exist"):
        load(tmp_path / "nowhere")


@pytest.mark.gpu
def test_bf16_on_cuda_matches_transformers(hf_folder):
    from transformers import Qwen3ForCausalLM

    model, _ = load(hf_folder, device="cuda", dtype="bfloat16")
    assert model.lm_head.weight.device.type == "cuda" and model.lm_head.weight.dtype == torch.bfloat16
    reference = Qwen3ForCausalLM.from_pretrained(hf_folder, dtype=torch.bfloat16).to("cuda").eval()
    ids = INPUT_IDS.cuda()
    pos = positions(*ids.shape).cuda()
    with torch.no_grad():
        ours = model(ids, pos, attn_mask=causal_mask(pos)).float()
        theirs = reference(input_ids=ids).logits.float()
    torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)


# --- which checkpoint "default" names ----------------------------------------------------------------------------


def test_the_environment_variable_names_the_checkpoint_used_where_none_is_named(tmp_path, monkeypatch):
    from dice_copilot.model.checkpoint import CHECKPOINT_ENV, DEFAULT_CHECKPOINT_DIR, resolve_checkpoint_dir

    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    assert resolve_checkpoint_dir(None) == resolve_checkpoint_dir("default") == tmp_path
    assert resolve_checkpoint_dir(str(DEFAULT_CHECKPOINT_DIR)) == DEFAULT_CHECKPOINT_DIR  # a named folder wins
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path / "gone"))
    with pytest.raises(CheckpointError, match=f"named by the environment variable {CHECKPOINT_ENV}"):
        resolve_checkpoint_dir("default")
    monkeypatch.delenv(CHECKPOINT_ENV)
    assert resolve_checkpoint_dir(None) == DEFAULT_CHECKPOINT_DIR
