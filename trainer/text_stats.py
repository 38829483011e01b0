"""How varied a body of training text is: distinct pre-tokeniser words and the xz compression ratio.

A tokenizer can only learn merges inside the words its pre-tokeniser cuts, and a model learns little from text that
compresses far better than ordinary code does, so these two figures say whether a data set is worth training on
(both the CuKe report and the pretraining corpus report print them). The words are those of the Qwen2
pre-tokenisation regex that the project's tokenizers use (`tokenizer_training.QWEN2_PRETOKENIZE_REGEX`).
"""

from __future__ import annotations

import lzma
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from tokenizers import Regex, pre_tokenizers

from .tokenizer_training import QWEN2_PRETOKENIZE_REGEX

# xz compresses at most this many bytes of a sample: the ratio of a large text settles well before that, and the
# whole text would take minutes at preset 6.
XZ_SAMPLE_BYTES = 64 << 20


@dataclass(frozen=True)
class TextStats:
    """Size and variety of one body of text."""

    texts: int
    chars: int
    distinct_words: int  # distinct pieces cut by the Qwen2 pre-tokeniser
    xz_ratio: float  # raw bytes / xz-compressed bytes (of the first XZ_SAMPLE_BYTES)

    def as_dict(self) -> dict:
        return asdict(self)


def text_stats(texts: Iterable[str]) -> TextStats:
    """Stats of `texts` taken together (joined by newlines for the compression ratio)."""
    splitter = pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False)
    words: set[str] = set()
    compressor = lzma.LZMACompressor(preset=6)
    raw = packed = count = chars = 0
    for text in texts:
        count += 1
        chars += len(text)
        words.update(piece for piece, _ in splitter.pre_tokenize_str(text))
        if raw < XZ_SAMPLE_BYTES:
            data = (text + "\n").encode("utf-8", errors="replace")[:XZ_SAMPLE_BYTES - raw]
            raw += len(data)
            packed += len(compressor.compress(data))
    packed += len(compressor.flush())
    # Whitespace-only pieces say nothing of vocabulary; they would count every indentation depth as a word.
    distinct = sum(1 for w in words if w.strip())
    return TextStats(count, chars, distinct, round(raw / packed, 2) if packed and raw else 0.0)
