"""DiceTokenizer: chat tokens parsed as ids, mask/pad hidden on decode, stop ids, mask id by number, clear errors."""

import json

import pytest

from dice_copilot.model.tokenizer import DiceTokenizer, TokenizerError
from model_helpers import write_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = write_tokenizer(tmp_path_factory.mktemp("tok"))
    (folder / "config.json").write_text(json.dumps({"mask_token_id": 3, "pad_token_id": 0}))
    return folder


def test_special_tokens_in_text_become_their_ids(tokenizer_dir):
    tok = DiceTokenizer.from_dir(tokenizer_dir)
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == tok.token_to_id("<|im_start|>") and ids[-1] == tok.token_to_id("<|im_end|>")
    assert tok.encode("x")[0] != tok.eos_token_id  # no BOS/EOS inserted


def test_decode_hides_mask_and_pad_but_keeps_chat_tokens(tokenizer_dir):
    tok = DiceTokenizer.from_dir(tokenizer_dir)
    ids = tok.encode("int i = 0;") + [tok.mask_token_id, tok.pad_token_id] + tok.encode("<|im_end|>")
    assert tok.decode(ids) == "int i = 0;<|im_end|>"


def test_ids_the_engine_needs(tokenizer_dir):
    tok = DiceTokenizer.from_dir(tokenizer_dir)
    assert tok.mask_token_id == 3 and tok.eos_token_id == tok.token_to_id("<|endoftext|>") == tok.pad_token_id
    assert tok.stop_token_ids == [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")]
    assert tok.vocab_size == len(json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"])


def test_mask_id_is_taken_by_number_not_spelling(tokenizer_dir):
    # SDAR spells the mask "<MASK>" in added_tokens.json; only the id matters.
    assert DiceTokenizer.from_dir(tokenizer_dir, mask_token_id=7).mask_token_id == 7


def test_missing_files_and_ids_are_clear_errors(tmp_path, tokenizer_dir):
    with pytest.raises(TokenizerError, match=r"tokenizer\.json is missing"):
        DiceTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(TokenizerError, match=r"tokenizer\.json is not a valid tokenizer\.json"):
        DiceTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    with pytest.raises(TokenizerError, match="no mask_token_id"):
        DiceTokenizer.from_dir(tmp_path)


def test_save_round_trip_keeps_the_side_files(tokenizer_dir, tmp_path):
    tok = DiceTokenizer.from_dir(tokenizer_dir)
    tok.save(tmp_path / "out")
    assert (tmp_path / "out" / "tokenizer_config.json").read_bytes() == (tokenizer_dir / "tokenizer_config.json").read_bytes()
    again = DiceTokenizer.from_dir(tmp_path / "out", mask_token_id=3)
    text = "<|im_start|>user\n__global__ void k() {}<|im_end|>\n"
    assert again.encode(text) == tok.encode(text) and again.decode(again.encode(text)) == text
