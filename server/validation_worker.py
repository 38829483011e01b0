"""Validation worker process: runs `dice_copilot.validator.validate` for the server, one JSON request per line.

It lives in its own session (process group) so the server can kill it together with every compiler and candidate
process it started when a job is superseded or cancelled; the server then starts a fresh one. Protocol (stdin →
stdout, one JSON object per line): request `{"id", "problem": {"source", "path", "class_name"} | null,
"candidates": [{"source", "path"}, ...], "policy", "budget": {...}, "compile_config": {...}}` (`budget` and
`compile_config`: the validator's Budget and CompileConfig as JSON) → response `{"id", "verdicts": [{...}, ...]}` (in
the candidates' order) or `{"id", "error": "..."}`. A `{"ping": true, "compile_config": {...}}` request answers
`{"pong": true}` once the validator is imported and its pools for that CompileConfig are started.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _protocol_stream():
    """Keep a private copy of stdout for the protocol and send everything else (prints, nvcc output) to stderr."""
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def main() -> int:
    out = _protocol_stream()
    from dice_copilot.server import backend

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            out.write(json.dumps({"id": None, "error": f"bad request line: {error}"}) + "\n")
            continue
        if request.get("ping"):
            backend.warm_validator(request.get("compile_config"))
            out.write(json.dumps({"pong": True}) + "\n")
            continue
        try:
            verdicts = backend.run_validation(request)
            out.write(json.dumps({"id": request.get("id"), "verdicts": verdicts}) + "\n")
        except Exception as error:  # a broken candidate or problem must not end the worker
            out.write(json.dumps({"id": request.get("id"), "error": f"{type(error).__name__}: {error}",
                                  "traceback": traceback.format_exc(limit=8)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
