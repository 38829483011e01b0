"""Document context for the language server: pure functions over document text (no LSP, no I/O except reference lookup).

Everything here must survive half-typed code: unclosed braces, unterminated strings and comments, positions past the
end of a line or of the file. Offsets are indices into the Python `str` (code points); LSP positions are converted
with `position_to_offset` / `offset_to_position` in the negotiated encoding.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------------------------------------------------
# Positions


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _units(char: str, encoding: str) -> int:
    """Code units of one code point in the LSP position encoding."""
    if encoding == "utf-8":
        return len(char.encode("utf-8", errors="surrogatepass"))
    if encoding == "utf-32":
        return 1
    return 2 if ord(char) > 0xFFFF else 1


class LineIndex:
    """Line starts of a text (LSP counts `\\n`, `\\r\\n` and `\\r` as line ends), built once per document version so
    that position conversions cost one line, not the whole text."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [match.end() for match in _LINE_BREAK.finditer(text)]

    def line_end(self, line: int) -> int:
        """Offset of the line terminator (or end of text) of `line`."""
        if line + 1 < len(self.starts):
            end = self.starts[line + 1] - 1
            if end > 0 and self.text[end] == "\n" and self.text[end - 1] == "\r":
                end -= 1
            return end
        return len(self.text)

    def offset(self, line: int, character: int, encoding: str = "utf-16") -> int:
        """Offset of an LSP position; out-of-range lines clamp to the start / end of the text, characters to the end
        of the line, and a position inside a surrogate pair (or a UTF-8 sequence) lands before that character."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[line], self.line_end(line)
        budget = max(character, 0)
        if encoding == "utf-32" or (encoding == "utf-16" and self.text[start:end].isascii()):
            return start + min(budget, end - start)
        units, offset = 0, start
        while offset < end:
            width = _units(self.text[offset], encoding)
            if units + width > budget:
                break
            units += width
            offset += 1
        return offset

    def position(self, offset: int, encoding: str = "utf-16") -> tuple[int, int]:
        """(line, character) of an offset; offsets are clamped into the text and onto their line."""
        offset = min(max(offset, 0), len(self.text))
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        offset = min(offset, self.line_end(line))
        return line, sum(_units(char, encoding) for char in self.text[start:offset])


def position_to_offset(text: str, line: int, character: int, encoding: str = "utf-16") -> int:
    """`LineIndex(text).offset(...)` for one-off conversions."""
    return LineIndex(text).offset(line, character, encoding)


def offset_to_position(text: str, offset: int, encoding: str = "utf-16") -> tuple[int, int]:
    """`LineIndex(text).position(...)` for one-off conversions."""
    return LineIndex(text).position(offset, encoding)


# --------------------------------------------------------------------------------------------------------------------
# CUDA / C++ scanning


@dataclass(frozen=True)
class KernelBody:
    """A `__global__`/`__device__` function whose body runs from `body_start` (just after `{`) to `body_end` (the
    closing `}`, or the end of the scanned text when unclosed). Offsets are in the text that was scanned."""

    name: str
    qualifier: str
    signature_start: int
    body_start: int
    body_end: int
    closed: bool


@dataclass(frozen=True)
class CudaScan:
    """Kernel bodies plus the comment / literal spans of a C++ text, so a caller can tell code from prose."""

    kernels: tuple[KernelBody, ...]
    inert_spans: tuple[tuple[int, int], ...]

    def in_comment_or_literal(self, offset: int) -> bool:
        """True when `offset` is strictly inside a comment or literal (right after a closed one is code again)."""
        return any(start < offset < end for start, end in self.inert_spans)


_IDENT = re.compile(r"[^\W\d]\w*")
_KERNEL_QUALIFIERS = ("__global__", "__device__")


def _skip_cpp_inert(text: str, index: int) -> int | None:
    """If a comment, string or char literal starts at `index`, return the offset just past it (or len(text) when it
    is unterminated); otherwise None."""
    if text.startswith("//", index):
        end = text.find("\n", index)
        return len(text) if end == -1 else end
    if text.startswith("/*", index):
        end = text.find("*/", index + 2)
        return len(text) if end == -1 else end + 2
    char = text[index]
    if char in "\"'":
        scan = index + 1
        length = len(text)
        while scan < length:
            current = text[scan]
            if current == "\\":
                scan += 2
                continue
            if current == char:
                return scan + 1
            if current == "\n":
                return scan  # an unterminated literal ends at the line end, as compilers treat it
            scan += 1
        return length
    return None


def scan_cuda(text: str) -> CudaScan:
    """Find every `__global__`/`__device__` function body and every comment/literal span in C++/CUDA text."""
    kernels: list[KernelBody] = []
    inert: list[tuple[int, int]] = []
    # `pending` is a qualifier seen at this point, waiting for its `{` (function) or `;`/`=` (declaration/variable).
    pending: dict | None = None
    open_bodies: list[tuple[dict, int]] = []  # (pending info, depth of its body) for bodies not yet closed
    depth = 0
    paren = 0
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char in "/\"'":
            skipped = _skip_cpp_inert(text, index)
            if skipped is not None:
                inert.append((index, skipped))
                index = skipped
                continue
        if char == "_" or char.isalpha():
            match = _IDENT.match(text, index)
            word = match.group(0)
            if word in _KERNEL_QUALIFIERS and pending is None and not open_bodies:
                pending = {"qualifier": word, "start": index, "name": "", "last_ident": ""}
            elif word in _KERNEL_QUALIFIERS and pending is not None and word == "__global__":
                pending["qualifier"] = word
            elif pending is not None and paren == 0:
                pending["last_ident"] = word
            index = match.end()
            continue
        if pending is not None:
            if char == "(":
                if paren == 0:
                    pending["name"] = pending["last_ident"]
                paren += 1
            elif char == ")":
                paren = max(paren - 1, 0)
            elif paren == 0 and char in ";=":
                pending = None
            elif paren == 0 and char == "{":
                depth += 1
                open_bodies.append((pending, depth))
                pending["body_start"] = index + 1
                pending = None
                index += 1
                continue
        if char == "{":
            depth += 1
        elif char == "}":
            if open_bodies and open_bodies[-1][1] == depth:
                info, _ = open_bodies.pop()
                kernels.append(KernelBody(info["name"], info["qualifier"], info["start"], info["body_start"], index,
                                          True))
            depth = max(depth - 1, 0)
        index += 1
    for info, _ in open_bodies:
        kernels.append(KernelBody(info["name"], info["qualifier"], info["start"], info["body_start"], length, False))
    kernels.sort(key=lambda kernel: kernel.body_start)
    return CudaScan(tuple(kernels), tuple(inert))


# --------------------------------------------------------------------------------------------------------------------
# Python scanning: string literals, CUDA source strings, nn.Module classes


@dataclass(frozen=True)
class PyString:
    """A Python string literal: `start`/`end` span the whole literal, `content_start`/`content_end` its inside."""

    start: int
    end: int
    content_start: int
    content_end: int
    triple: bool
    closed: bool


_PY_STRING_START = re.compile(r"(?i)(?:[rbuf]|rb|br|fr|rf)?(\"\"\"|'''|\"|')")


def scan_python_strings(text: str) -> list[PyString]:
    """String literals of Python source, skipping comments; unterminated literals run to the line end (single quotes)
    or to the end of the text (triple quotes)."""
    strings: list[PyString] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == "#":
            end = text.find("\n", index)
            index = length if end == -1 else end
            continue
        match = _PY_STRING_START.match(text, index) if char in "\"'rRbBuUfF" else None
        if match:
            quote = match.group(1)
            content_start = match.end()
            scan = content_start
            closed = False
            while scan < length:
                if text[scan] == "\\":  # an escaped quote never ends a literal, raw or not
                    scan += 2
                    continue
                if text.startswith(quote, scan):
                    closed = True
                    break
                if len(quote) == 1 and text[scan] == "\n":
                    break
                scan += 1
            scan = min(scan, length)
            end = scan + len(quote) if closed else scan
            strings.append(PyString(index, end, content_start, scan, len(quote) == 3, closed))
            index = end
            continue
        if char == "_" or char.isalpha():
            index = _IDENT.match(text, index).end()
            continue
        index += 1
    return strings


_ASSIGNED_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=\n]*)?=\s*$")
_CUDA_SOURCES_KW = re.compile(r"\bcuda_sources\s*=")
_LOAD_INLINE_CALL = re.compile(r"\bload_inline\s*\(")


def _call_arguments(text: str, open_paren: int, strings: list[PyString]) -> tuple[int, list[tuple[int, int]]]:
    """For the call whose `(` is at `open_paren`: the offset of its closing `)` (or the end of the text) and the
    spans of its comma-separated top-level arguments; strings and comments are skipped."""
    string_at = {literal.start: literal.end for literal in strings}
    spans = []
    depth = 0
    begin = open_paren + 1
    index = open_paren
    while index < len(text):
        if index in string_at:
            index = string_at[index]
            continue
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                break
        elif char == "," and depth == 1:
            spans.append((begin, index))
            begin = index + 1
        elif char == "#":
            newline = text.find("\n", index)
            index = len(text) if newline == -1 else newline
            continue
        index += 1
    if text[begin:index].strip():
        spans.append((begin, index))
    return index, spans


def _names_and_strings_in(text: str, start: int, end: int, strings: list[PyString]) -> tuple[set[str], list[PyString]]:
    """Identifiers (outside strings) and string literals in text[start:end]."""
    inside = [literal for literal in strings if start <= literal.start < end]
    masked = list(text[start:end])
    for literal in inside:
        for position in range(literal.start - start, min(literal.end, end) - start):
            masked[position] = " "
    return set(_IDENT.findall("".join(masked))), inside


def find_cuda_strings(text: str) -> list[PyString]:
    """Triple-quoted strings of a Python file that hold CUDA source: passed as `cuda_sources` to `load_inline`
    (keyword or third positional argument, directly, in a list, or through a variable assigned a string elsewhere),
    or, while the `load_inline` call is not written yet, any triple-quoted string that defines a `__global__`."""
    strings = scan_python_strings(text)
    triple = [literal for literal in strings if literal.triple]
    chosen: dict[int, PyString] = {}
    cuda_names: set[str] = set()

    def take_expression(start: int, end: int) -> None:
        names, literals = _names_and_strings_in(text, start, end, strings)
        cuda_names.update(names)
        for literal in literals:
            if literal.triple:
                chosen[literal.start] = literal

    string_starts = {literal.start for literal in strings}
    for match in _LOAD_INLINE_CALL.finditer(text):
        if any(literal.start < match.start() < literal.end for literal in strings):
            continue
        open_paren = match.end() - 1
        _, arguments = _call_arguments(text, open_paren, strings)
        positional = 0
        for start, end in arguments:
            keyword = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)", text[start:end])
            if keyword:
                if keyword.group(1) == "cuda_sources":
                    take_expression(start + keyword.end(), end)
                continue
            if positional == 2:
                take_expression(start, end)
            positional += 1
    for match in _CUDA_SOURCES_KW.finditer(text):  # e.g. a kwargs dict or a wrapper function taking cuda_sources=
        if match.start() in string_starts or any(literal.start < match.start() < literal.end for literal in strings):
            continue
        line_end = text.find("\n", match.end())
        take_expression(match.end(), len(text) if line_end == -1 else line_end)
    for literal in triple:
        line_start = text.rfind("\n", 0, literal.start) + 1
        assigned = _ASSIGNED_NAME.search(text[line_start:literal.start])
        if assigned and assigned.group(1) in cuda_names:
            chosen[literal.start] = literal
        elif literal.start not in chosen and "__global__" in text[literal.content_start:literal.content_end]:
            chosen[literal.start] = literal
    return sorted(chosen.values(), key=lambda literal: literal.start)


@dataclass(frozen=True)
class ModuleClass:
    """A `class X(nn.Module)` definition: the header line and the span of the whole class (by indentation)."""

    name: str
    line: int
    start: int
    end: int


_CLASS_HEADER = re.compile(r"^([ \t]*)class[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(([^)]*)\)[ \t]*:", re.MULTILINE)
_MODULE_BASE = re.compile(r"(?:^|[\s,(])(?:torch\.)?(?:nn\.)?Module\s*(?:,|$)")


def find_module_classes(text: str, include_generated: bool = False) -> list[ModuleClass]:
    """`nn.Module` subclasses of a Python file (headers inside strings ignored). `ModelNew` classes are skipped unless
    `include_generated`: they are our output, not something to generate a kernel for."""
    strings = scan_python_strings(text)
    classes = []
    for match in _CLASS_HEADER.finditer(text):
        if any(literal.start < match.start() < literal.end for literal in strings):
            continue
        name, bases = match.group(2), match.group(3)
        if not _MODULE_BASE.search(bases):
            continue
        if name == "ModelNew" and not include_generated:
            continue
        indent = len(match.group(1).expandtabs())
        end = _indented_block_end(text, match.end(), indent, strings)
        line = text.count("\n", 0, match.start())
        classes.append(ModuleClass(name, line, match.start() + len(match.group(1)), end))
    return classes


def _indented_block_end(text: str, body_from: int, indent: int, strings: list[PyString]) -> int:
    """End offset of a block whose header ends at `body_from`: the first non-blank, non-comment line at an indentation
    of at most `indent` that is not inside a string."""
    position = text.find("\n", body_from)
    if position == -1:
        return len(text)
    position += 1
    last_content_end = position
    while position < len(text):
        newline = text.find("\n", position)
        line_end = len(text) if newline == -1 else newline
        line = text[position:line_end]
        stripped = line.strip()
        in_string = any(literal.start < position < literal.end for literal in strings)
        if stripped and not stripped.startswith("#") and not in_string:
            if len(line.expandtabs()) - len(line.expandtabs().lstrip()) <= indent:
                return last_content_end
        if stripped:
            last_content_end = line_end
        position = line_end + 1
    return len(text)


_GET_INPUTS = re.compile(r"^def[ \t]+get_inputs[ \t]*\(", re.MULTILINE)


def defines_get_inputs(text: str) -> bool:
    """True when a module-level `def get_inputs(` exists."""
    return bool(_GET_INPUTS.search(text))


# --------------------------------------------------------------------------------------------------------------------
# Cursor context


@dataclass(frozen=True)
class KernelContext:
    """Where the cursor is: the kernel around it and the offsets (in the whole document) of its body."""

    kind: str  # "cuda-file" or "python-string"
    kernel_name: str
    body_start: int
    body_end: int


CUDA_SUFFIXES = (".cu", ".cuh")


def document_kind(path_or_uri: str, language_id: str | None = None) -> str | None:
    """"cuda", "python" or None, from the file suffix (then the editor's language id)."""
    lowered = path_or_uri.lower()
    if lowered.endswith(CUDA_SUFFIXES):
        return "cuda"
    if lowered.endswith((".py", ".pyi")):
        return "python"
    if language_id in ("cuda", "cuda-cpp", "cuda-c"):
        return "cuda"
    if language_id == "python":
        return "python"
    return None


@dataclass(frozen=True)
class CudaRegion:
    """A stretch of CUDA text in a document (the whole `.cu` file, or the inside of one Python string) and its scan;
    kernel offsets in `scan` are relative to `start`."""

    start: int
    end: int
    scan: CudaScan


def cuda_regions(text: str, kind: str) -> list[CudaRegion]:
    """Every CUDA region of a document of the given kind ("cuda" or "python")."""
    if kind == "cuda":
        return [CudaRegion(0, len(text), scan_cuda(text))]
    if kind == "python":
        return [CudaRegion(literal.content_start, literal.content_end,
                           scan_cuda(text[literal.content_start:literal.content_end]))
                for literal in find_cuda_strings(text)]
    return []


def kernel_in_regions(regions: list[CudaRegion], offset: int, kind: str,
                      include_signature: bool = False) -> KernelContext | None:
    """The kernel whose body (or, with `include_signature`, whose signature or body) contains `offset`; None when the
    offset is elsewhere or inside a comment or literal."""
    for region in regions:
        if not region.start <= offset <= region.end:
            continue
        local = offset - region.start
        if region.scan.in_comment_or_literal(local) and not include_signature:
            return None
        for kernel in reversed(region.scan.kernels):
            start = kernel.signature_start if include_signature else kernel.body_start
            if start <= local <= kernel.body_end:
                return KernelContext("cuda-file" if kind == "cuda" else "python-string", kernel.name,
                                     region.start + kernel.body_start, region.start + kernel.body_end)
    return None


def kernel_at(text: str, offset: int, kind: str) -> KernelContext | None:
    """The `__global__`/`__device__` body containing `offset`, in CUDA text or in a CUDA string of Python source;
    None when the cursor is elsewhere or inside a comment or literal."""
    return kernel_in_regions(cuda_regions(text, kind), offset, kind)


def kernel_names(regions: list[CudaRegion]) -> list[str]:
    return [kernel.name for region in regions for kernel in region.scan.kernels if kernel.name]


@dataclass(frozen=True)
class InfillWindow:
    """Prefix / suffix handed to the DICE infill prompt: the document around the cursor, cut at line boundaries to
    stay within the prompt budget."""

    prefix: str
    suffix: str
    cursor: int
    prefix_start: int
    suffix_end: int


def infill_window(text: str, offset: int, max_prefix_chars: int = 6000, max_suffix_chars: int = 4000) -> InfillWindow:
    """Split the document at the cursor; long sides keep the lines nearest the cursor."""
    offset = min(max(offset, 0), len(text))
    prefix_start = 0
    if offset > max_prefix_chars:
        cut = text.find("\n", offset - max_prefix_chars, offset)
        prefix_start = offset - max_prefix_chars if cut == -1 else cut + 1
    suffix_end = len(text)
    if len(text) - offset > max_suffix_chars:
        cut = text.rfind("\n", offset, offset + max_suffix_chars)
        suffix_end = offset + max_suffix_chars if cut == -1 else cut + 1
    return InfillWindow(text[prefix_start:offset], text[offset:suffix_end], offset, prefix_start, suffix_end)


# --------------------------------------------------------------------------------------------------------------------
# Reference module


@dataclass(frozen=True)
class ReferenceModule:
    """The PyTorch module a kernel must match: its source, where it came from and the class name."""

    source: str
    path: str | None
    class_name: str


_MAX_REFERENCE_BYTES = 1_000_000
_MAX_SIBLINGS_SCANNED = 64


def reference_in_source(source: str, path: str | None = None) -> ReferenceModule | None:
    """A reference in this Python source: `class Model(nn.Module)` (else the first non-generated nn.Module) together
    with a `get_inputs()` function."""
    if not defines_get_inputs(source):
        return None
    classes = find_module_classes(source)
    if not classes:
        return None
    named = [module for module in classes if module.name == "Model"]
    return ReferenceModule(source, path, (named or classes)[0].name)


def _read_small_text(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_REFERENCE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


_KERNEL_FILE_SUFFIX = re.compile(r"_kernel(?:_\d+)?$")


def find_reference(document_path: str | None, document_text: str, kind: str,
                   configured_path: str | None = None) -> ReferenceModule | None:
    """The reference module for a document: the one named in settings, else the document itself (Python), else a
    sibling — `x.py` for `x.cu` / `x_kernel.py` / `x_kernel_2.py`, then any sibling `.py` defining a module and
    `get_inputs()`."""
    if configured_path:
        configured = Path(configured_path).expanduser()
        if not configured.is_absolute() and document_path:
            configured = Path(document_path).parent / configured
        text = _read_small_text(configured)
        if text is not None:
            found = reference_in_source(text, str(configured))
            if found:
                return found
    if kind == "python":
        found = reference_in_source(document_text, document_path)
        if found and found.class_name != "ModelNew":
            return found
    if not document_path:
        return None
    document = Path(document_path)
    stem = _KERNEL_FILE_SUFFIX.sub("", document.stem)
    preferred = [document.with_name(stem + ".py")]
    try:
        siblings = sorted(p for p in document.parent.glob("*.py") if p not in preferred and p != document)
    except OSError:
        siblings = []
    for candidate in preferred + siblings[:_MAX_SIBLINGS_SCANNED]:
        if candidate == document:
            continue
        text = _read_small_text(candidate)
        if text is None:
            continue
        found = reference_in_source(text, str(candidate))
        if found:
            return found
    return None


def new_kernel_path(source_path: Path) -> Path:
    """First free `x_kernel.py`, `x_kernel_2.py`, ... next to `x.py`: generated code never overwrites a file."""
    stem = _KERNEL_FILE_SUFFIX.sub("", source_path.stem)
    candidate = source_path.with_name(f"{stem}_kernel.py")
    number = 2
    while candidate.exists():
        candidate = source_path.with_name(f"{stem}_kernel_{number}.py")
        number += 1
    return candidate
