"""Tokenizer training: byte-level BPE with the DICE special tokens, readable by AutoTokenizer and DiceTokenizer."""

import json

import pytest
from sft_helpers import kernel_source, make_tokenizer, prompt_for, write_jsonl

from dice_copilot.cli import main as cli_main
from dice_copilot.trainer.sft import load_tokenizer_dir
from dice_copilot.trainer.tokenizer_training import SPECIAL_TOKENS, TokenizerTrainingError, train_tokenizer

TEXT = prompt_for("relu") + kernel_source("relu") + "// ünïcödé ∑ 日本語 \t tabs\n\n<|im_end|>\n<|endoftext|>"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def test_files_and_special_token_ids(tokenizer_dir):
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        assert (tokenizer_dir / name).is_file(), name
    tokenizer = load_tokenizer_dir(tokenizer_dir)
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert tokenizer.mask_token_id == 3 and tokenizer.eos_token_id == 0
    assert sorted(tokenizer.stop_token_ids) == [0, 2]
    assert tokenizer.vocab_size <= 500


def test_round_trip_and_special_tokens_parsed(tokenizer_dir):
    tokenizer = load_tokenizer_dir(tokenizer_dir)
    ids = tokenizer.encode(TEXT)
    assert ids.count(1) == 2 and ids.count(2) == 2  # <|im_start|> and <|im_end|> as single tokens
    # decode() drops pad (= <|endoftext|>) and mask by contract; everything else comes back byte-exact.
    assert tokenizer.decode(ids) == TEXT.replace("<|endoftext|>", "")
    # BPE merges learned on the kernels make them much shorter than their bytes.
    assert len(tokenizer.encode(kernel_source("relu"))) < len(kernel_source("relu").encode()) / 2


def test_auto_tokenizer_reads_the_folder_and_agrees(tokenizer_dir):
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ours = load_tokenizer_dir(tokenizer_dir)
    assert auto.encode(TEXT, add_special_tokens=False) == ours.encode(TEXT)
    assert auto.decode(auto.encode(TEXT, add_special_tokens=False)) == TEXT
    assert auto.eos_token == auto.pad_token == "<|endoftext|>"
    assert auto.convert_tokens_to_ids("<|MASK|>") == 3
    chat = auto.apply_chat_template([{"role": "user", "content": "Write the CUDA relu kernel."}],
                                    add_generation_prompt=True, tokenize=False)
    assert chat == prompt_for("relu")


def test_vocab_size_is_an_upper_bound_and_too_small_is_an_error(tmp_path):
    out = train_tokenizer(["abc abd abe " * 50], 270, tmp_path / "t", min_frequency=1)
    assert load_tokenizer_dir(out).vocab_size <= 270
    with pytest.raises(TokenizerTrainingError, match="at least 260"):
        train_tokenizer(["abc"], 100, tmp_path / "small")


def test_cli_trains_from_files_and_folders(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.cu").write_text(kernel_source("relu") * 5)
    (corpus / "sub" / "b.py").write_text(kernel_source("square") * 5)
    (corpus / "ignored.bin").write_bytes(b"\xff\xfe")
    extra = tmp_path / "extra.txt"
    extra.write_text(prompt_for("negate") * 5)
    out = tmp_path / "tok"
    assert cli_main(["train", "tokenizer", "--corpus", str(corpus), str(extra), "--vocab-size", "300",
                     "--out", str(out)]) == 0
    assert "3 file(s)" in capsys.readouterr().out
    assert load_tokenizer_dir(out).encode("<|MASK|>") == [3]

    assert cli_main(["train", "tokenizer", "--corpus", str(tmp_path / "nope"), "--vocab-size", "300",
                     "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_reads_jsonl_samples_by_their_text_fields(tmp_path, capsys):
    names = ["relu", "square", "negate", "scale"]
    samples = [{"text": kernel_source(n)} for n in names]
    samples += [{"prompt": prompt_for(n), "response": kernel_source(n)} for n in names]
    samples += [{"messages": [{"role": "user", "content": f"Write the CUDA {n} kernel."},
                              {"role": "assistant", "content": kernel_source(n)}]} for n in names]
    corpus = write_jsonl(tmp_path / "samples.jsonl", samples * 5)
    out = tmp_path / "tok"
    assert cli_main(["train", "tokenizer", "--corpus", str(corpus), "--vocab-size", "400", "--out", str(out)]) == 0
    assert "1 file(s)" in capsys.readouterr().out
    vocab = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    merged = [token for token, i in vocab.items() if i >= len(SPECIAL_TOKENS) and len(token) > 1]
    # Raw JSON text would teach merges of its syntax: escaped newlines (a backslash), quoted keys; and the chat markup
    # would teach pieces of the special tokens, which encoding matches whole.
    assert not [t for t in merged if "\\" in t or '"' in t or "<|" in t or "|>" in t]
    assert len(load_tokenizer_dir(out).encode(kernel_source("relu"))) < len(kernel_source("relu").encode()) / 2


@pytest.mark.parametrize("line, message", [
    ('{"pytorch_code": "x", "cuda_code": "y"}', "needs 'prompt' + 'response', 'messages', 'text' or an infill task's"),
    ("not json", "not valid JSON"),
])
def test_cli_rejects_jsonl_without_text_fields(tmp_path, capsys, line, message):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text(line + "\n")
    assert cli_main(["train", "tokenizer", "--corpus", str(corpus), "--vocab-size", "300",
                     "--out", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert message in err and f"{corpus}:1" in err


def test_cli_reads_an_xz_compressed_jsonl_corpus_in_a_folder(tmp_path, capsys):
    import lzma

    folder = tmp_path / "corpus"
    folder.mkdir()
    lines = "".join(json.dumps({"text": kernel_source(n)}) + "\n" for n in ["relu", "square", "negate"] * 5)
    with lzma.open(folder / "train.jsonl.xz", "wt", encoding="utf-8") as handle:
        handle.write(lines)
    out = tmp_path / "tok"
    assert cli_main(["train", "tokenizer", "--corpus", str(folder), "--vocab-size", "400", "--out", str(out)]) == 0
    assert "1 file(s)" in capsys.readouterr().out
    vocab = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    merged = [token for token, i in vocab.items() if i >= len(SPECIAL_TOKENS) and len(token) > 1]
    assert not [t for t in merged if "\\" in t or '"' in t], "read as samples, not as compressed bytes or JSON"
    assert len(load_tokenizer_dir(out).encode(kernel_source("relu"))) < len(kernel_source("relu").encode()) / 2
