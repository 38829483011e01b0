"""DiceTokenizer: the checkpoint's `tokenizer.json` (Qwen2 byte-level BPE for DICE) plus the ids the engine needs.

The mask token is taken by id (config `mask_token_id`), never by spelling: SDAR's tokenizer files disagree on
it (`<|MASK|>` in tokenizer_config.json, `<MASK>` in added_tokens.json), while the id is what the model was
trained with.
"""

import json
from pathlib import Path

from tokenizers import Tokenizer

ENDOFTEXT = "<|endoftext|>"
IM_END = "<|im_end|>"
TOKENIZER_FILE = "tokenizer.json"
# Files copied along with tokenizer.json when a tokenizer is saved, so HF's AutoTokenizer reads the folder too.
TOKENIZER_SIDE_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)


class TokenizerError(ValueError):
    """A tokenizer folder that cannot be used; the message names the file and says what to do."""


class DiceTokenizer:
    """Text <-> token ids for prompts and generations; special tokens written in text map to their ids."""

    def __init__(self, tokenizer: Tokenizer, mask_token_id: int, pad_token_id: int | None = None,
                 source_dir: Path | None = None):
        self._tokenizer = tokenizer
        self._source_dir = source_dir
        # The HF side files are kept in memory, so `save` works even after the source folder was replaced.
        self._side_files = {
            name: (source_dir / name).read_bytes()
            for name in TOKENIZER_SIDE_FILES
            if source_dir is not None and (source_dir / name).is_file()
        }
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        if mask_token_id < 0:
            raise TokenizerError(f"mask_token_id must be a token id (>= 0), got {mask_token_id}")
        self.mask_token_id = mask_token_id
        self.eos_token_id = self._required_id(ENDOFTEXT)
        self.pad_token_id = self.eos_token_id if pad_token_id is None else pad_token_id
        # A sequence ends at <|endoftext|> or at the end of the assistant turn (docs/decoding.md#stopping).
        self.stop_token_ids = [self.eos_token_id] + [i for i in [tokenizer.token_to_id(IM_END)] if i is not None]

    def _required_id(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            where = self._source_dir / TOKENIZER_FILE if self._source_dir else "the tokenizer"
            raise TokenizerError(f"{where} has no {token} token; DICE prompts and stopping need it")
        return token_id

    @classmethod
    def from_dir(cls, path: str | Path, mask_token_id: int | None = None) -> "DiceTokenizer":
        """Load `tokenizer.json` from a checkpoint folder; the mask id comes from the argument or config.json."""
        folder = Path(path)
        tokenizer_path = folder / TOKENIZER_FILE
        if not tokenizer_path.is_file():
            raise TokenizerError(
                f"{tokenizer_path} is missing: a DICE checkpoint folder needs the fast-tokenizer file "
                f"tokenizer.json (copy it from the checkpoint the weights came from)"
            )
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as err:  # tokenizers raises a bare Exception for malformed JSON
            raise TokenizerError(f"{tokenizer_path} is not a valid tokenizer.json ({err})") from err
        config = _read_json_if_present(folder / "config.json")
        if mask_token_id is None:
            mask_token_id = config.get("mask_token_id")
        if mask_token_id is None:
            raise TokenizerError(
                f"no mask token id for {folder}: config.json has no mask_token_id; pass mask_token_id explicitly"
            )
        return cls(tokenizer, int(mask_token_id), config.get("pad_token_id"), source_dir=folder)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no BOS/EOS added; `<|im_start|>` and the like written in text become their ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, the texts spread over the tokenizer's threads (training data: many at once)."""
        return [e.ids for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, leaving out mask and pad tokens (pad is `<|endoftext|>` for Qwen, so it ends nothing)."""
        hidden = {self.mask_token_id, self.pad_token_id}
        return self._tokenizer.decode([i for i in ids if i not in hidden], skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def save(self, path: str | Path) -> None:
        """Write tokenizer.json (and the HF side files it was loaded with) into the folder `path`."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self._tokenizer.save(str(folder / TOKENIZER_FILE))
        for name, content in self._side_files.items():
            (folder / name).write_bytes(content)


def _read_json_if_present(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TokenizerError(f"{path} is not valid JSON ({err}); fix or replace it") from err
