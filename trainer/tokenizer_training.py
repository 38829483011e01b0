"""Train a byte-level BPE tokenizer (Qwen2 style) for models trained from scratch, saved in the HF layout.

The pipeline is the one Qwen2/Qwen3 (and so SDAR/DICE) use: NFC normalisation, the Qwen2 pre-tokenisation
regex, byte-level mapping, no prefix space, no BOS. The four special tokens the prompts and the engine need
(`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, `<|MASK|>`) take ids 0..3, so the vocabulary has exactly
`vocab_size` entries. `<|endoftext|>` is both EOS and pad, as in Qwen.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK = "<|MASK|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, MASK)
# Encoding matches these whole before anything else, so a .jsonl sample's text is split at them for training.
SPECIAL_TOKEN_SPLIT = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))

# Qwen2's pre-tokenisation regex (splits letters, single digits, punctuation runs and whitespace runs).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# A minimal Qwen chat template (user/assistant turns, generation prompt), so `apply_chat_template` produces
# exactly the hand-built DICE prompt structure.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Files taken from a corpus directory: code and text the copilot sees.
CORPUS_SUFFIXES = frozenset({".py", ".cu", ".cuh", ".c", ".cc", ".cpp", ".h", ".hpp", ".txt", ".md", ".jsonl"})

# Smallest vocabulary that holds the 256 byte symbols plus the special tokens.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


class TokenizerTrainingError(ValueError):
    """Bad input to tokenizer training (vocabulary size, corpus files); the message says what to fix."""


def build_untrained_tokenizer() -> Tokenizer:
    """The Qwen2 byte-level BPE pipeline with an empty vocabulary, ready for a `BpeTrainer`."""
    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path, min_frequency: int = 2) -> Path:
    """Train a byte-level BPE on `texts` and write tokenizer.json, tokenizer_config.json,
    special_tokens_map.json, vocab.json and merges.txt to `out_dir` (created). Returns `out_dir`.

    The vocabulary has at most `vocab_size` entries (fewer when the corpus runs out of merges of at least
    `min_frequency` occurrences).
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise TokenizerTrainingError(
            f"vocab_size {vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE} "
            f"(256 bytes + {len(SPECIAL_TOKENS)} special tokens); pass a larger --vocab-size"
        )
    tokenizer = build_untrained_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_non_empty(texts), trainer=trainer)
    return save_hf_tokenizer(tokenizer, out_dir)


def _non_empty(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if not isinstance(text, str):
            raise TokenizerTrainingError(f"corpus items must be str, got {type(text).__name__}")
        if text:
            yield text


def save_hf_tokenizer(tokenizer: Tokenizer, out_dir: str | Path) -> Path:
    """Write the HF tokenizer files so `AutoTokenizer.from_pretrained` and `DiceTokenizer.from_dir` read them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    # vocab.json + merges.txt let slow/legacy Qwen2 tokenizer classes load the same vocabulary.
    tokenizer.model.save(str(out))

    added_tokens_decoder = {
        str(tokenizer.token_to_id(token)): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": ENDOFTEXT,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "mask_token": MASK,
        "additional_special_tokens": [IM_START, IM_END],
        "added_tokens_decoder": added_tokens_decoder,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 32768,
        "split_special_tokens": False,
    }
    special_tokens_map = {
        "eos_token": ENDOFTEXT,
        "pad_token": ENDOFTEXT,
        "mask_token": MASK,
        "additional_special_tokens": [IM_START, IM_END],
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(special_tokens_map, indent=2) + "\n")
    return out


def iter_corpus_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand the corpus arguments: files as given, directories to their code/text files (sorted)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix.lower() in CORPUS_SUFFIXES
                                                                        or _is_jsonl(p)))
            )
        elif path.is_file():
            files.append(path)
        else:
            raise TokenizerTrainingError(f"corpus path {path} does not exist; pass existing files or folders")
    if not files:
        raise TokenizerTrainingError(
            f"no corpus files found under {[str(p) for p in paths]} "
            f"(folders contribute files ending in {sorted(CORPUS_SUFFIXES)})"
        )
    return files


def read_corpus(files: Iterable[Path]) -> Iterator[str]:
    """Yield each file's text, a .jsonl file's record by record (see `jsonl_texts`); a file that is not UTF-8 is an
    error naming the file."""
    for path in files:
        try:
            if _is_jsonl(path):
                yield from jsonl_texts(path)
            else:
                yield path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise TokenizerTrainingError(f"corpus file {path} is not UTF-8 text ({err}); remove it or convert it") from err


def _is_jsonl(path: Path) -> bool:
    """A .jsonl file, plain or xz-compressed (the pretraining corpus's train.jsonl.xz)."""
    return path.name.lower().endswith((".jsonl", ".jsonl.xz"))


def jsonl_texts(path: Path) -> Iterator[str]:
    """The text of each record of a .jsonl file of SFT samples (`text`, `prompt` + `response`, or `messages`, read as
    SFT reads them), not its JSON syntax. The special tokens of the chat markup are left out: the trainer sees the
    pieces between them, as encoding will."""
    from .jsonl import json_objects
    from .sft_data import SFTDataError, render_record

    for where, record in json_objects(path, TokenizerTrainingError):
        try:
            prompt, response = render_record(record, where)
        except SFTDataError as err:
            raise TokenizerTrainingError(
                f"{err}; a .jsonl corpus file is read as SFT samples (pass other text as .txt or code files)"
            ) from None
        yield from SPECIAL_TOKEN_SPLIT.split(prompt + response)


def register_train(train_subparsers) -> None:
    """Add `train tokenizer` to the `dice-copilot train` group."""
    parser = train_subparsers.add_parser(
        "tokenizer",
        help="train a byte-level BPE tokenizer (Qwen2 style) for models trained from scratch",
        description="Train a byte-level BPE tokenizer with the DICE special tokens and save it in the HF layout.",
    )
    parser.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                        help="text or code files, .jsonl files of SFT samples (their text fields are read), or "
                             "folders of such files")
    parser.add_argument("--vocab-size", type=int, required=True, metavar="N",
                        help=f"vocabulary size including the special tokens (>= {MIN_VOCAB_SIZE})")
    parser.add_argument("--min-frequency", type=int, default=2, metavar="K",
                        help="merge only pairs seen at least K times")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write the tokenizer files into")
    parser.set_defaults(run=_run_train_tokenizer)


def _run_train_tokenizer(args) -> int:
    try:
        files = iter_corpus_files(args.corpus)
        out = train_tokenizer(read_corpus(files), args.vocab_size, args.out, min_frequency=args.min_frequency)
    except TokenizerTrainingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    vocab = Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size()
    print(f"trained a {vocab}-token tokenizer on {len(files)} file(s); wrote {out}")
    return 0
