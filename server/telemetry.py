"""Opt-in local JSONL log of shown / accepted suggestions (never sent anywhere)."""

from __future__ import annotations

import json
import time
from pathlib import Path

DEFAULT_PATH = Path("~/.cache/dice-copilot/telemetry.jsonl")


class TelemetryLog:
    """Appends one JSON object per event when enabled; write errors disable nothing else."""

    def __init__(self):
        self.enabled = False
        self.path = DEFAULT_PATH.expanduser()

    def configure(self, enabled: bool, path: str | None) -> None:
        self.enabled = enabled
        self.path = Path(path).expanduser() if path else DEFAULT_PATH.expanduser()

    def record(self, event: str, **fields) -> str | None:
        """Write the event; returns an error message when the file cannot be written."""
        if not self.enabled:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as stream:
                stream.write(json.dumps({"time": time.time(), "event": event, **fields}, default=str) + "\n")
        except OSError as error:
            return f"telemetry log {self.path} not writable: {error}"
        return None
