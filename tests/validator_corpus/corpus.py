"""The validator corpus's manifest (manifest.toml beside this file) read into entries, and the one rule that says
whether a verdict is what an entry expects; shared by tests/test_validator_corpus.py and bench/validator_corpus.py."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
PROBLEMS = FOLDER / "problems"

# Headers that only a CUDA build of torch ships (a CPU wheel lacks c10/cuda/impl/cuda_cmake_macros.h, which they
# include): sources that include them compile only where torch has CUDA.
_CUDA_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"]((?:ATen/cuda|c10/cuda)/[\w/.]+)[>"]')


@dataclass(frozen=True)
class Entry:
    """One corpus file: `kind` "honest" (must pass) or "wrong" (must be rejected as `verdict`)."""

    kind: str
    name: str
    file: Path
    problem: Path
    group: str  # the honest file's style or the wrong file's bug: what the bench's tables group by
    policies: tuple[str, ...]
    verdict: str  # "passed", or the failure code a wrong file gets
    detail: tuple[str, ...] = ()  # a wrong file's failure message contains one of these
    strict_static_code: str | None = None  # the static rule that rejects an ide-only file under strict

    @property
    def sources(self) -> list[Path]:
        """The module and the kernel files beside it (a folder-per-candidate entry builds them with load())."""
        if self.file.name != "model_new.py":
            return [self.file]
        return [self.file] + sorted(p for p in self.file.parent.rglob("*") if p.suffix in (".cu", ".cuh", ".cpp"))

    @property
    def uses_triton(self) -> bool:
        return "@triton.jit" in self.file.read_text()

    def cuda_torch_header(self) -> str | None:
        """The first header of a CUDA build of torch that the candidate's sources include, if any."""
        for path in self.sources:
            match = _CUDA_TORCH_INCLUDE.search(path.read_text())
            if match:
                return match.group(1)
        return None


def entries() -> list[Entry]:
    manifest = tomllib.loads((FOLDER / "manifest.toml").read_text())
    found = []
    for kind in ("honest", "wrong"):
        for item in manifest[kind]:
            found.append(Entry(kind=kind, name=item["name"], file=FOLDER / item["file"], problem=PROBLEMS / item["problem"],
                               group=item["style"] if kind == "honest" else item["bug"],
                               policies=tuple(item["policies"]), verdict=item["verdict"],
                               detail=tuple(item.get("detail", ())),
                               strict_static_code=item.get("strict_static_code")))
    return found


def judge(entry: Entry, verdict) -> str | None:
    """None when a device verdict is what the manifest expects of `entry`, else what is off (for a test message)."""
    if entry.verdict == "passed":
        if verdict.passed and not verdict.compile_only:
            return None
        if verdict.passed:
            return "compiled but was not run on a device (compile-only verdict)"
        return f"failed: {verdict.failure_code}: {verdict.failure}"
    if verdict.passed:
        return f"passed, expected failure code {entry.verdict!r}"
    if verdict.failure_code != entry.verdict:
        return f"failure code {verdict.failure_code!r} ({verdict.failure}), expected {entry.verdict!r}"
    if not any(phrase in (verdict.failure or "") for phrase in entry.detail):
        return f"rejected as {entry.verdict} but the message names none of {list(entry.detail)}: {verdict.failure}"
    return None


def torch_has_cuda_headers() -> bool:
    import torch
    return (Path(torch.__file__).parent / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists()
