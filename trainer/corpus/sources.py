"""Where the pretraining corpus's files come from: the installed Python packages, the CUDA toolkit's headers, and
source distributions fetched from the package index by exact version. Each source yields `SourceFile`s with the
licence that applies to that file; files that cannot be read as text are counted in `skipped`, never yielded."""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata
import json
import tarfile
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .licences import package_licence, spdx_of_file

# Source code the copilot reads and writes. Type stubs (.pyi) repeat their modules' signatures and are left out.
CODE_SUFFIXES = frozenset({".py", ".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".inl"})
# Larger files are generated tables and amalgamations, not code anyone writes.
MAX_FILE_BYTES = 400_000
# Packages never taken: this project itself (its tests hold the held-out evaluation sets) and any copy of the
# held-out public benchmark.
EXCLUDED_PACKAGES = ("dice-copilot", "kernelbench")
# CCCL (Thrust, CUB, libcu++) ships inside the toolkit under its own licence; files that lack an SPDX line are
# covered by the project's licence.
CCCL_LICENCE = "Apache-2.0 WITH LLVM-exception"
DEFAULT_INDEX = "https://pypi.org/simple"
SOURCES = ("site-packages", "cuda-toolkit", "sdist")
# Kernel libraries whose sdists carry CUDA sources (pinned, so that a rebuild fetches the same files).
DEFAULT_SDISTS = ("deepspeed==0.19.8", "xformers==0.0.35", "liger-kernel==0.8.5", "flash-attn==2.8.3.post2",
                  "causal-conv1d==1.7.0", "mamba-ssm==2.3.2.post1")


@dataclass(frozen=True)
class SourceFile:
    origin: str  # "site-packages" | "cuda-toolkit" | "sdist"
    package: str
    version: str
    path: str  # inside the package (or the toolkit's include folder)
    licence: str | None
    text: str


class SourceError(RuntimeError):
    """A named source could not be read or fetched; the message says which and why."""


def installed_packages(skipped: Counter, names: set[str] | None = None) -> Iterator[SourceFile]:
    """Code files of the installed distributions (all of them, or those in `names`), in name order."""
    seen = set()
    dists = sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        name = (dist.metadata["Name"] or "").lower()
        if not name or name in seen or (names is not None and name not in names):
            continue
        seen.add(name)
        if any(excluded in name for excluded in EXCLUDED_PACKAGES):
            continue
        files = list(dist.files or [])
        licence = package_licence(dist.metadata, _licence_text(dist, files))
        for entry in files:
            if entry.suffix not in CODE_SUFFIXES or ".dist-info" in str(entry):
                continue
            text = _read(Path(dist.locate_file(entry)), skipped)
            if text is not None:
                yield SourceFile("site-packages", name, dist.version, str(entry), spdx_of_file(text) or licence, text)


def cuda_toolkit_headers(cuda_home: Path, skipped: Counter) -> Iterator[SourceFile]:
    """Headers under the toolkit's include folder that carry an open licence: their own SPDX line, or CCCL's."""
    include = Path(cuda_home) / "include"
    if not include.is_dir():
        raise SourceError(f"{include} is not a folder: set --cuda-home to the CUDA toolkit's root")
    version = _cuda_version(Path(cuda_home))
    for path in sorted(include.rglob("*")):
        if path.suffix not in CODE_SUFFIXES or not path.is_file():
            continue
        text = _read(path, skipped)
        if text is None:
            continue
        relative = str(path.relative_to(include))
        licence = spdx_of_file(text) or (CCCL_LICENCE if relative.startswith("cccl/") else "NVIDIA CUDA EULA")
        yield SourceFile("cuda-toolkit", "cuda-toolkit", version, relative, licence, text)


def source_distributions(requirements: list[str], cache: Path, skipped: Counter,
                         index_url: str = DEFAULT_INDEX) -> Iterator[SourceFile]:
    """Code files of each `name==version` source distribution, fetched once into `cache` (sha256-checked)."""
    for requirement in requirements:
        name, version = _pinned(requirement)
        archive = fetch_sdist(name, version, cache, index_url)
        yield from _archive_files(archive, name, version, skipped)


def fetch_sdist(name: str, version: str, cache: Path, index_url: str = DEFAULT_INDEX) -> Path:
    """The sdist of name==version from the index's JSON simple API (PEP 691), downloaded into `cache` unless a
    file with the index's sha256 is already there."""
    cache.mkdir(parents=True, exist_ok=True)
    normal = name.lower().replace("_", "-").replace(".", "-")
    request = urllib.request.Request(f"{index_url.rstrip('/')}/{normal}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            listing = json.load(response)
    except OSError as exc:
        raise SourceError(f"cannot list {name} on {index_url}: {exc}") from exc
    stems = {f"{normal}-{version}", f"{normal.replace('-', '_')}-{version}"}
    for entry in listing.get("files", []):
        filename = entry["filename"]
        if filename.endswith((".tar.gz", ".zip")) and filename.rsplit(".tar.gz", 1)[0].rsplit(".zip", 1)[0].lower() \
                in stems:
            break
    else:
        raise SourceError(f"{name}=={version} has no source distribution on {index_url}")
    target = cache / filename
    expected = entry["hashes"].get("sha256")
    if target.is_file() and _sha256(target.read_bytes()) == expected:
        return target
    try:
        with urllib.request.urlopen(entry["url"], timeout=300) as response:
            data = response.read()
    except OSError as exc:
        raise SourceError(f"cannot download {filename}: {exc}") from exc
    if expected and _sha256(data) != expected:
        raise SourceError(f"{filename}: sha256 does not match the index's ({expected})")
    partial = target.with_suffix(target.suffix + ".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def _archive_files(archive: Path, name: str, version: str, skipped: Counter) -> Iterator[SourceFile]:
    members = _archive_members(archive)
    metadata = email.parser.Parser().parsestr(next((_decode(data) for path, data in members
                                                    if path.count("/") == 1 and path.endswith("/PKG-INFO")), "") or "")
    licence_text = next((_decode(data) or "" for path, data in members
                         if path.count("/") == 1 and Path(path).name.upper().startswith(("LICENSE", "COPYING"))), "")
    licence = package_licence(metadata, licence_text)
    for path, data in members:
        relative = path.split("/", 1)[-1]
        if Path(relative).suffix not in CODE_SUFFIXES:
            continue
        if len(data) > MAX_FILE_BYTES:
            skipped["too_large"] += 1
            continue
        text = _decode(data)
        if text is None:
            skipped["not_text"] += 1
            continue
        yield SourceFile("sdist", name, version, relative, spdx_of_file(text) or licence, text)


def _archive_members(archive: Path) -> list[tuple[str, bytes]]:
    """(path, bytes) of every regular file of a .tar.gz or .zip, in archive order."""
    members = []
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    members.append((info.filename, zf.read(info)))
        return members
    with tarfile.open(archive, "r:gz") as tf:
        for info in tf:
            if info.isfile():
                members.append((info.name, tf.extractfile(info).read()))
    return members


def _pinned(requirement: str) -> tuple[str, str]:
    name, sep, version = requirement.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise SourceError(f"source distribution {requirement!r}: name it as NAME==VERSION (e.g. deepspeed==0.19.8) "
                          "so that the corpus can be rebuilt exactly")
    return name.strip(), version.strip()


def _licence_text(dist, files) -> str:
    for entry in files:
        if ".dist-info" in str(entry) and entry.name.upper().startswith(("LICENSE", "COPYING")):
            text = _read(Path(dist.locate_file(entry)), Counter())
            if text:
                return text
    return ""


def _read(path: Path, skipped: Counter) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            skipped["too_large"] += 1
            return None
        text = _decode(path.read_bytes())
    except OSError:
        skipped["unreadable"] += 1
        return None
    if text is None:
        skipped["not_text"] += 1
    return text


def _decode(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _cuda_version(cuda_home: Path) -> str:
    try:
        info = json.loads((cuda_home / "version.json").read_text())
        return info["cuda"]["version"]
    except (OSError, ValueError, KeyError):
        # Toolkits without version.json (pip-installed ones) are found in folders named cuda-X.Y.
        name = cuda_home.resolve().name
        return name.removeprefix("cuda-") if name.startswith("cuda-") else "unknown"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return _sha256(text.encode("utf-8"))

