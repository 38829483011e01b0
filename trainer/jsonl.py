"""Reading JSONL data files (SFT records, CuKe pairs, the pretraining corpus), plain or xz-compressed (`.xz`), with
errors that name the file and line."""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterator
from pathlib import Path


def json_objects(path: Path, error: type[Exception]) -> Iterator[tuple[str, dict]]:
    """("path:line", object) for each non-blank line; a line that is not one JSON object raises `error` saying where."""
    path = Path(path)
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                            "each line must be one JSON object") from None
            if not isinstance(value, dict):
                raise error(f"{where}: each line must be one JSON object, not {type(value).__name__}")
            yield where, value
