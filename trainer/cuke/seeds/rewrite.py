"""Semantics-preserving rewrites of a candidate's CUDA source, used to make further variants of a pair: the
top-level definitions (helpers, kernels, the host function) put in another order that still defines every name
before its first use. Together with a fresh code style (other names, helpers inlined or split out, other checks and
bindings, see codestyle) this is a different text of the same program; the variant is validated like any pair."""

from __future__ import annotations

import random
import re

_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "alignas", "__launch_bounds__",
             "__align__", "static_cast", "reinterpret_cast", "template", "typename"}
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def reorder_definitions(source: str, rng: random.Random) -> str | None:
    """`source` with its top-level items after the leading preprocessor lines in a random order in which every item
    still comes after the items whose names it uses; None when no other order exists or the source cannot be cut
    into items safely."""
    start = _preamble_end(source)
    items = _items(source[start:])
    if items is None or len(items) < 3:
        return None
    pinned = [item for item in items if re.match(r"\s*(?://[^\n]*\n\s*)*using\s+namespace\b", item)]
    movable = [item for item in items if item not in pinned]
    defined = [_defines(item) for item in movable]
    deps = []
    for i, item in enumerate(movable):
        # an item's own names count as uses too: an overload or a specialisation stays after the earlier
        # definition of its name
        used = set(_IDENTIFIER.findall(_strip(item)))
        deps.append({j for j in range(i) if defined[j] & used})
    order, placed = [], set()
    while len(order) < len(movable):
        ready = [i for i in range(len(movable)) if i not in placed and deps[i] <= placed]
        if not ready:
            return None
        pick = rng.choice(ready)
        order.append(pick)
        placed.add(pick)
    if order == sorted(order):
        return None
    body = "\n".join(item.strip("\n") + "\n" for item in pinned + [movable[i] for i in order])
    return source[:start] + body


def _preamble_end(source: str) -> int:
    """Offset past the leading preprocessor lines (#include, #define with continuations) and blank lines."""
    position, continued = 0, False
    for line in source.splitlines(keepends=True):
        if continued or line.startswith("#") or not line.strip():
            continued = line.rstrip("\n").endswith("\\")
            position += len(line)
        else:
            break
    return position


def _items(text: str) -> list[str] | None:
    """Cut at depth-0 `;` and `}` (a `}` followed by `;` keeps it), comments going with the item after them."""
    items, start, depth, i, n = [], 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i) + 2
            if i == 1:
                return None
            continue
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "#" and (i == 0 or text[i - 1] == "\n"):
            return None  # a directive between definitions: keep the order
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                end = i + 1
                rest = text[end:]
                semi = re.match(r"[ \t]*;", rest)
                if semi:
                    end += semi.end()
                end = _line_end(text, end)
                items.append(text[start:end])
                start, i = end, end
                continue
        elif c == ";" and depth == 0:
            end = _line_end(text, i + 1)
            items.append(text[start:end])
            start, i = end, end
            continue
        i += 1
    if text[start:].strip():
        if depth != 0:
            return None
        items.append(text[start:])
    return [item if item.endswith("\n") else item + "\n" for item in items]


def _line_end(text: str, index: int) -> int:
    newline = text.find("\n", index)
    end = len(text) if newline < 0 else newline + 1
    return end if not text[index:end].strip() else index


def _strip(item: str) -> str:
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', " ", item, flags=re.S)


def _defines(item: str) -> set[str]:
    """Names an item declares: a struct / class, a using or typedef alias, a constant, or a function."""
    code = _strip(item)
    names = set(re.findall(r"\b(?:struct|class)\s+(?:alignas\(\d+\)\s+)?(\w+)", code))
    names |= set(re.findall(r"\busing\s+(\w+)\s*=", code))
    names |= set(re.findall(r"\btypedef\b[^;]*?\b(\w+)\s*;", code))
    names |= set(re.findall(r"\b(?:constexpr|const)\s+[\w:<>]+\s+(\w+)\s*=", code.split("{")[0]))
    head = code.split("{")[0]
    for match in re.finditer(r"\b(\w+)\s*(?:<[^<>(){};]*>)?\s*\(", head):
        if match.group(1) not in _KEYWORDS:
            names.add(match.group(1))
            break
    return names
