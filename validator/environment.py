"""What this machine lacks when a build fails for a reason outside the candidate, and how to fix it.

A build log whose first error is a missing header or compiler is read here (`diagnose_build`). The missing piece is
told apart by whom the file belongs to:

- torch's CUDA headers (`c10/cuda/...`, `ATen/cuda/...`) come with a CUDA build of torch only; the CPU wheel ships
  some of them (e.g. `ATen/cuda/CUDAContext.h`) without what they include (`c10/cuda/impl/cuda_cmake_macros.h`, the
  toolkit's library headers), and has no CUDA libraries to link against. With a CPU torch (`torch.version.cuda` is
  None) anything that reaches those headers needs a CUDA build of torch.
- the CUDA toolkit's library headers (`cusparse.h`, `cublas_v2.h`, ...) come with the toolkit's development
  packages, not with nvcc alone (a pip-installed nvcc has none of them).
- a missing `nvcc` or `c++` is a missing compiler.

A header the candidate includes that belongs to neither is the candidate's own error (a compile error).

The fix is written twice, for the two places a user reads it: `cli` in the terms of `dice-copilot` (a pip command,
CUDA_HOME and PATH), `editor` in the terms of the editor's settings (`diceCopilot.nvcc.path`) and the server's
Python."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# What a needed piece is called in a verdict's details["environment"]["needs"].
CUDA_TORCH, TOOLKIT_HEADERS, COMPILER, TORCH_INSTALL = "cuda_torch", "toolkit_headers", "compiler", "torch_install"

# The toolkit's library headers, by the library (and package) that ships them.
TOOLKIT_LIBRARY_HEADERS = {
    r"cusparse.*\.h": "cuSPARSE",
    r"cublas.*\.h": "cuBLAS",
    r"cusolver.*\.h": "cuSOLVER",
    r"cufft.*\.h": "cuFFT",
    r"curand.*\.h": "cuRAND",
    r"nvrtc\.h": "NVRTC",
    r"npp.*\.h": "NPP",
    r"nvjpeg\.h": "nvJPEG",
    r"nvtx3?/.*|nvToolsExt.*\.h": "NVTX",
    r"cuda_runtime.*\.h|cuda\.h|cuda_fp16\.h|cuda_bf16\.h|driver_types\.h|vector_types\.h": "the CUDA runtime",
}
# The toolkit headers a CUDA build of torch's ATen/cuda/CUDAContext.h includes.
TORCH_CUDA_NEEDS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")
TORCH_HEADER_ROOTS = ("c10/", "ATen/", "torch/", "caffe2/")
TORCH_CUDA_PARTS = ("c10/cuda/", "ATen/cuda/", "ATen/native/cuda/", "ATen/cudnn/", "torch/csrc/cuda/")
TORCH_WHEEL_INDEX = "https://download.pytorch.org/whl"

_MISSING_HEADER = re.compile(r"^(?P<includer>[^\s:]+):\d+(?::\d+)?: (?:fatal )?error: (?P<header>[^\s:]+): "
                             r"No such file or directory", re.MULTILINE)
_INCLUDED_FROM = re.compile(r"^(?:In file included from|\s+from) (?P<file>[^\s:]+):\d+[:,]$")
_MISSING_TOOL = re.compile(r"nice: .(?P<tool>nvcc|c\+\+|g\+\+). *: No such file or directory|"
                           r"No such file or directory: '(?P<tool2>nvcc|c\+\+|g\+\+)'|"
                           r"(?P<tool3>nvcc|c\+\+|g\+\+): (?:command )?not found")


@dataclass(frozen=True)
class MissingPiece:
    """What this machine lacks to check a candidate, the facts that show it, and the fix for each audience."""

    needs: str  # CUDA_TORCH | TOOLKIT_HEADERS | COMPILER | TORCH_INSTALL
    missing: str  # the file or program that is not there
    included_by: str | None  # the header that includes `missing` (relative to its include folder)
    reached_from: str | None  # the header the candidate itself includes, when it is not `included_by`
    torch: str
    torch_cuda: str | None  # torch.version.cuda: None for a CPU build
    toolkit: str | None  # the CUDA toolkit's folder
    toolkit_lacks: tuple[str, ...]  # of TORCH_CUDA_NEEDS, those the toolkit does not have
    message: str  # the facts, one sentence
    fix_cli: str
    fix_editor: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["toolkit_lacks"] = list(self.toolkit_lacks)
        return data


def diagnose_build(log: str) -> MissingPiece | None:
    """The machine's missing piece behind a failed build's log, or None when the failure is the candidate's own."""
    tool = _MISSING_TOOL.search(log)
    if tool:
        return _missing_compiler(tool.group("tool") or tool.group("tool2") or tool.group("tool3"))
    match = _MISSING_HEADER.search(log)
    if match is None:
        return None
    header, includer = match.group("header"), _relative_header(match.group("includer"))
    # The "In file included from X:4, / from cuda.cu:6:" lines right above the error: the outermost torch or
    # toolkit header in that chain is the one the candidate included.
    chain = []
    for line in reversed(log[:match.start()].splitlines()):
        included = _INCLUDED_FROM.match(line)
        if included is None:
            break
        chain.insert(0, _relative_header(included.group("file")))
    outer = [h for h in chain if h is not None]
    reached_from = outer[-1] if outer and outer[-1] != includer else None
    return _missing_header(header, includer, reached_from)


def _relative_header(path: str) -> str | None:
    """`ATen/cuda/CUDAContext.h` for a file under torch's or the toolkit's include folder; None for other files."""
    for marker in ("/torch/include/", "/include/"):
        if marker in path and (marker == "/torch/include/" or _is_toolkit_path(path)):
            return path.split(marker, 1)[1]
    return None


def _is_toolkit_path(path: str) -> bool:
    return bool(re.search(r"/cuda[^/]*/(?:targets/[^/]+/)?include/", path))


def _library_of(header: str) -> str | None:
    return next((library for pattern, library in TOOLKIT_LIBRARY_HEADERS.items() if re.fullmatch(pattern, header)),
                None)


def _missing_header(header: str, includer: str | None, reached_from: str | None) -> MissingPiece | None:
    torch_version, torch_cuda = _torch_build()
    from_torch_cuda = any(h and h.startswith(TORCH_CUDA_PARTS) for h in (includer, reached_from, header))
    torch_header = header.startswith(TORCH_HEADER_ROOTS)
    library = _library_of(header)
    if not (torch_header or library or includer):
        return None  # a header of the candidate's own, or a typo: its compile error
    toolkit = _toolkit_folder()
    lacks = tuple(h for h in TORCH_CUDA_NEEDS if not _toolkit_has(toolkit, h))
    top = reached_from or includer or header
    if torch_cuda is None and (from_torch_cuda or torch_header):
        needs = CUDA_TORCH
        message = (f"`{top}` needs a CUDA build of torch, and torch {torch_version} is a CPU build (torch.version.cuda "
                   f"is None): its copy of those headers is incomplete (`{header}` is missing"
                   + (f", included by `{includer}`" if includer and includer != top else "")
                   + ") and it has no CUDA libraries to link a kernel against")
    elif torch_header:
        needs = TORCH_INSTALL
        message = (f"torch {torch_version} (CUDA {torch_cuda}) lacks its own header `{header}`"
                   + (f", included by `{includer}`" if includer else "") + ": the installation is incomplete")
    else:
        needs = TOOLKIT_HEADERS
        what = f"{library}'s development header" if library else "a header"
        message = (f"the CUDA toolkit at {toolkit or '(none found)'} lacks `{header}` ({what})"
                   + (f", included by `{includer}`" if includer else ""))
    piece = MissingPiece(needs, header, includer, reached_from, torch_version, torch_cuda, toolkit, lacks, message,
                         "", "")
    return _with_fixes(piece, library)


def _missing_compiler(tool: str) -> MissingPiece:
    torch_version, torch_cuda = _torch_build()
    what = "the CUDA compiler `nvcc`" if tool == "nvcc" else f"the C++ compiler `{tool}`"
    piece = MissingPiece(COMPILER, tool, None, None, torch_version, torch_cuda, _toolkit_folder(), (),
                         f"{what} was not found", "", "")
    return _with_fixes(piece, None)


def _with_fixes(piece: MissingPiece, library: str | None) -> MissingPiece:
    python = sys.executable or "python3"
    version = _toolkit_version(piece.toolkit)
    dev_package = f"cuda-libraries-dev-{version.replace('.', '-')}" if version else "cuda-libraries-dev"
    libraries = ", ".join(dict.fromkeys(_library_of(h) for h in piece.toolkit_lacks))
    lacks = (f"; the CUDA toolkit also lacks headers that a CUDA build of torch includes ({libraries}): install them "
             f"(e.g. `apt install {dev_package}`)") if piece.toolkit_lacks else ""
    if piece.needs == CUDA_TORCH:
        pip = f"`{python} -m pip install torch=={piece.torch.split('+')[0]} --index-url {_wheel_index(version)}`"
        cli = f"install a CUDA build of torch: {pip}" + (f"{lacks}, or set CUDA_HOME to a complete toolkit" if lacks
                                                          else "")
        editor = (f"install a CUDA build of torch into the Python the server runs ({python}): {pip}, then restart "
                  f"the server" + (f"{lacks}, or set diceCopilot.nvcc.path to the nvcc of a complete toolkit"
                                   if lacks else ""))
    elif piece.needs == TORCH_INSTALL:
        cli = editor = f"reinstall torch: `{python} -m pip install --force-reinstall torch` (same build)"
    elif piece.needs == TOOLKIT_HEADERS:
        package = f"the {library} development headers" if library else "the missing headers"
        install = f"install {package} of the CUDA toolkit (e.g. `apt install {dev_package}`)"
        cli = f"{install}, or set CUDA_HOME to a complete CUDA toolkit (and put its bin/ first on PATH)"
        editor = f"{install}, or set diceCopilot.nvcc.path to the nvcc of a complete CUDA toolkit"
    elif piece.missing == "nvcc":
        cli = "install the CUDA toolkit, or put its bin/ on PATH and set CUDA_HOME to its folder"
        editor = "install the CUDA toolkit, or set diceCopilot.nvcc.path to its nvcc"
    else:
        cli = editor = f"install a C++ compiler (`{piece.missing}`, e.g. `apt install g++`)"
    return replace(piece, fix_cli=cli, fix_editor=editor)


def _wheel_index(toolkit_version: str | None) -> str:
    """torch's wheel index for the toolkit's CUDA version: torch builds extensions only with a toolkit of the CUDA
    major version it was built with. Without a toolkit, the index of CUDA 12.8 (the toolkit to install with it)."""
    return f"{TORCH_WHEEL_INDEX}/cu{(toolkit_version or '12.8').replace('.', '')}"


def _torch_build() -> tuple[str, str | None]:
    import torch

    return torch.__version__, torch.version.cuda


def _toolkit_folder() -> str | None:
    from torch.utils import cpp_extension

    from .compile import cuda_home

    folder = cpp_extension.CUDA_HOME or cuda_home()
    return folder if folder and Path(folder).is_dir() else None


def _toolkit_has(toolkit: str | None, header: str) -> bool:
    if toolkit is None:
        return False
    root = Path(toolkit)
    return any((folder / header).exists() for folder in [root / "include", *root.glob("targets/*/include")])


@functools.lru_cache(maxsize=8)
def _toolkit_version(toolkit: str | None) -> str | None:
    """"13.0" from the toolkit's nvcc (None when there is none)."""
    nvcc = Path(toolkit, "bin", "nvcc") if toolkit else None
    if nvcc is None or not nvcc.exists():
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release (\d+)\.(\d+)", out)
    return f"{match.group(1)}.{match.group(2)}" if match else None
