"""Suggestion cache: an LRU of validated infill results keyed by document context, plus type-through lookup (the user
typed the start of a cached suggestion: serve the rest)."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedSuggestion:
    """One validated infill: the text to insert and its verdict summary (wire form)."""

    id: str
    text: str
    verdict: dict


@dataclass(frozen=True)
class CacheEntry:
    uri: str
    prefix: str
    suffix: str
    params: str
    suggestions: tuple[CachedSuggestion, ...]
    reason: str  # why the list is empty, or "ok"
    stored_at: float


def context_key(uri: str, prefix: str, suffix: str, params: str) -> str:
    """Hash of everything that decides a suggestion: the document around the cursor, the reference, the checkpoint
    and the generation / validation settings (folded into `params` by the caller)."""
    digest = hashlib.sha256()
    for part in (uri, prefix, suffix, params):
        digest.update(part.encode("utf-8", errors="surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


class SuggestionCache:
    """LRU with a time-to-live; `capacity` entries of at most a few suggestions each keeps memory bounded."""

    def __init__(self, capacity: int = 100, ttl_s: float = 300.0):
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, entry: CacheEntry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, key: str) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if time.monotonic() - entry.stored_at > self.ttl_s:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def type_through(self, uri: str, prefix: str, suffix: str, params: str) -> list[CachedSuggestion]:
        """Remainders of cached suggestions the user has been typing along: same document, suffix and settings, the
        new prefix = cached prefix + typed text, and the typed text starts a cached suggestion."""
        now = time.monotonic()
        for entry in reversed(self._entries.values()):
            if (entry.uri != uri or entry.suffix != suffix or entry.params != params
                    or now - entry.stored_at > self.ttl_s or len(prefix) <= len(entry.prefix)
                    or not prefix.startswith(entry.prefix)):
                continue
            typed = prefix[len(entry.prefix):]
            remainders = [CachedSuggestion(s.id, s.text[len(typed):], s.verdict) for s in entry.suggestions
                          if s.text.startswith(typed) and len(s.text) > len(typed)]
            if remainders:
                return remainders
        return []

    def clear(self) -> None:
        self._entries.clear()
