"""Helper for the CuKe tests: compile several candidates' CUDA sources with one nvcc call (each wrapped in its own
namespace so their helper names do not clash), against the installed torch headers. Compile only, no GPU needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from dice_copilot.trainer.cuke.splits import infill_split

_INCLUDE = re.compile(r"^\s*#include[^\n]*\n", re.M)


def cuda_source_of(candidate: str) -> str:
    """The CUDA source string a candidate passes to load_inline."""
    parts = infill_split(candidate)
    assert parts is not None, "candidate has no single CUDA source assignment"
    namespace: dict = {}
    exec(parts.middle, namespace)  # the middle is one string assignment: nothing else runs
    return next(v for v in namespace.values() if isinstance(v, str) and "__global__" in v)


def torch_includes() -> list[str]:
    import torch
    base = Path(torch.__file__).parent / "include"
    return [str(base), str(base / "torch" / "csrc" / "api" / "include"), sysconfig.get_paths()["include"]]


# A CPU-only torch wheel ships the c10/cuda headers but not this generated one; its content in CUDA builds is just
# this define, so the sources can be compile-checked here as they will be on the GPU machine.
_CMAKE_MACROS = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


def _stub_includes(workdir: Path) -> list[str]:
    import torch
    if (Path(torch.__file__).parent / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():
        return []
    stub = workdir / "stub_include"
    (stub / "c10" / "cuda" / "impl").mkdir(parents=True, exist_ok=True)
    (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(_CMAKE_MACROS)
    return [str(stub)]


def nvcc_compile(sources: list[str], workdir: Path, arch: str = "sm_90", timeout: int = 600) -> tuple[int, str]:
    """Compile the sources as one translation unit; returns (exit code, compiler log)."""
    includes, bodies = [], []
    for i, source in enumerate(sources):
        includes += _INCLUDE.findall(source)
        undefs = "".join(f"#undef {m}\n" for m in re.findall(r"^\s*#\s*define\s+(\w+)", source, re.M))  # no leaks
        bodies.append(f"namespace candidate_{i} {{\n{_INCLUDE.sub('', source)}\n{undefs}}}  // namespace candidate_{i}\n")
    unit = "".join(dict.fromkeys(includes)) + "\n".join(bodies)
    path = workdir / "candidates.cu"
    path.write_text(unit)
    cmd = [shutil.which("nvcc") or "nvcc", "-c", str(path), "-o", str(workdir / "candidates.o"), f"-arch={arch}",
           "-std=c++17", "-O1", "--expt-relaxed-constexpr", "-D__CUDA_NO_HALF_OPERATORS__",
           "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
           "-DTORCH_EXTENSION_NAME=cuke_check", "-D_GLIBCXX_USE_CXX11_ABI=1", "-Xcompiler", "-fPIC"]
    cmd += [f"-I{p}" for p in _stub_includes(workdir) + torch_includes()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    return proc.returncode, proc.stdout + proc.stderr
