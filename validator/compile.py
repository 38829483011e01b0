"""Building candidate CUDA extensions: a content-addressed build cache, a fast path (kernels compiled by `nvcc -cubin`
without torch headers and embedded into the extension, host glue by g++ with a precompiled torch header) and the
load_inline-compatible path, hard timeouts that kill the whole compiler process group, and compiler messages mapped
back to candidate-file lines.

In the fast mode every build gets its own module name (`dice_<build key>`) while the pybind glue is compiled under
a name that follows the glue text only (`dice_<glue hash>`), so the glue's object file is shared by every
kernel-body infill; a generated one-line `PyInit_<unique>` forwards to the glue's init function. A warm worker can
therefore import any number of infills of one problem without a name clash. When the declarations allow it, the glue
binds by signature (`signature_bindings`): pointers the host unit defines, names the module file defines, so one
glue object serves every candidate whose functions have the same types, whatever they are called (the glue was the
slowest unit of a cold build on the H200: 3.3-4.8 s, BENCHMARKS.md)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .environment import diagnose_build
from .kernel_split import CUBIN_SYMBOL, SplitError, split_host_device, split_top_commas
from .problem import CUDA_SUFFIXES, ExtensionSpec, SourceSegment
from .verdict import Diagnostic, ValidatorError

DEFAULT_COMPILE_TIMEOUT_S = 180.0
# Compilers get their own process group so a timeout kills nvcc with its cicc/ptxas/gcc children. Worker processes
# turn this off: there the compilers must stay in the worker's group and die with it when the worker is killed.
COMPILERS_IN_OWN_GROUP = True
CACHE_ENV = "DICE_COPILOT_CACHE"
ARCH_ENV = "DICE_COPILOT_CUDA_ARCH"
PCH_HEADER = "dice_torch_pch.h"  # the file a precompiled header is built from (and -include'd as)
# The torch headers units start with: load_inline's pybind glue (main.cpp) with torch/extension.h, CUDA sources (its
# prelude, hence the split host unit) with torch/types.h; the split glue with torch/types.h + GLUE_HEADERS. The light
# ones matter: every g++ run instantiates the templates its headers leave pending, ~12 s per unit for
# torch/extension.h against ~4 s for torch/types.h (~7 s with GLUE_HEADERS) on this project's CPU machine,
# precompiled header or not.
FULL_TORCH_HEADER = "torch/extension.h"
LIGHT_TORCH_HEADER = "torch/types.h"


def usable_cpus() -> int:
    """CPU cores this process may run on (a `taskset` or container limit, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _side_by_side(fn, items: list, max_workers: int | None = None) -> list:
    """fn over items in threads (each call runs its compilers as subprocesses), at most one per usable core."""
    with ThreadPoolExecutor(max(1, min(len(items), max_workers or usable_cpus()))) as pool:
        return list(pool.map(fn, items))


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "dice-copilot" / "build")


@dataclass
class CompileConfig:
    """How candidate extensions are built."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    # "sm_90"-style target; None = the local GPU's arch, or $DICE_COPILOT_CUDA_ARCH, or sm_90 without a GPU.
    arch: str | None = None
    timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S
    # "fast": split kernels from torch host glue when possible; "kernelbench": the two translation units exactly
    # as load_inline writes them, compiled directly; "load_inline": torch's own load_inline in a subprocess.
    mode: str = "fast"
    # Precompile torch/extension.h once per flag set for the g++ side.
    use_pch: bool = True
    nvcc: str = "nvcc"
    cxx: str = "c++"
    # Also link the shared object (always on when it will be imported; off only for pure compile checks).
    link: bool = True


@dataclass
class BuildResult:
    """Outcome of building one extension."""

    ok: bool
    module_name: str
    so_path: str | None
    log: str
    seconds: float
    cached: bool = False
    timed_out: bool = False
    strategy: str = ""  # "split" | "full"
    failed_units: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Generated units this build compiled, and those whose object came from the object cache.
    compiled_units: list[str] = field(default_factory=list)
    reused_units: list[str] = field(default_factory=list)
    unit_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each compiled unit and the link

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


# ---------------------------------------------------------------- environment facts (flags, arch, versions)

def cuda_home() -> str:
    nvcc = shutil.which("nvcc")
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    if nvcc:
        real = Path(nvcc).resolve()
        text = real.read_text(errors="ignore")[:200] if real.stat().st_size < 4096 else ""
        match = re.search(r"exec\s+(\S+/bin/nvcc)", text)  # a shell wrapper pointing at the real nvcc
        if match:
            real = Path(match.group(1))
        return str(real.parent.parent)
    return "/usr/local/cuda"


def resolve_arch(arch: str | None) -> str:
    """The sm_XY target: explicit, env override, the local device, or sm_90."""
    if arch:
        return arch if arch.startswith("sm_") else "sm_" + arch.replace(".", "")
    if os.environ.get(ARCH_ENV):
        return resolve_arch(os.environ[ARCH_ENV])
    return _local_arch()


@functools.lru_cache(maxsize=1)
def _local_arch() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        caps = out.stdout.split()
        if out.returncode == 0 and caps:
            return "sm_" + caps[0].replace(".", "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "sm_90"


@dataclass(frozen=True)
class _TorchFlags:
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    signature: str  # every flag: what a whole build's cache key follows
    # the g++ units' flags only: what precompiled headers and glue objects follow, so candidates that differ only in
    # their nvcc or linker flags (e.g. extra_cuda_cflags=["-O3"]) share them
    host_signature: str


@functools.lru_cache(maxsize=32)
def torch_flags(arch: str, with_cuda: bool, extra_cflags: tuple, extra_cuda_cflags: tuple, extra_ldflags: tuple,
                extra_include_paths: tuple) -> _TorchFlags:
    """The exact compile/link flags the installed torch's load_inline would use (read from its ninja writer), with
    the GPU arch narrowed to `arch` and TORCH_EXTENSION_NAME left to the caller. The extra_* arguments are argv
    words (as ExtensionSpec holds them); the ninja writer joins them into a command line that is split here again,
    so each goes in shell-quoted and comes back as the one word it was."""
    import torch
    from torch.utils import cpp_extension as ce

    if ce.CUDA_HOME is None:
        ce.CUDA_HOME = cuda_home()
    number = arch.removeprefix("sm_")
    arch_flags = [] if any(f.startswith(("-arch", "-gencode", "--gpu-architecture")) for f in extra_cuda_cflags) \
        else [f"-gencode=arch=compute_{number},code=sm_{number}"]
    with tempfile.TemporaryDirectory() as tmp:
        ninja = Path(tmp) / "build.ninja"
        wanted = dict(path=str(ninja), name="DICE_EXT", sources=[f"{tmp}/main.cpp", f"{tmp}/cuda.cu"],
                      extra_cflags=shell_quoted(extra_cflags),
                      extra_cuda_cflags=shell_quoted(extra_cuda_cflags) + arch_flags,
                      extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=list(extra_include_paths),
                      with_cuda=with_cuda, with_sycl=False, is_standalone=False)
        params = inspect.signature(ce._write_ninja_file_to_build_library).parameters
        ce._write_ninja_file_to_build_library(**{k: v for k, v in wanted.items() if k in params})
        variables = dict(re.findall(r"^(\w+) = (.*)$", ninja.read_text(), flags=re.M))
    ld_params = inspect.signature(ce._prepare_ldflags).parameters
    ld_args = dict(extra_ldflags=list(extra_ldflags), with_cuda=with_cuda, with_sycl=False, verbose=False,
                   is_standalone=False)
    ldflags = ce._prepare_ldflags(**{k: v for k, v in ld_args.items() if k in ld_params})
    ldflags = _drop_missing_libraries(ldflags)

    def split(name):
        flags = shlex.split(variables.get(name, "")) + shlex.split(variables.get("post_" + name, "")) \
            if name == "cflags" else shlex.split(variables.get(name, "")) + shlex.split(variables.get("cuda_post_cflags", ""))
        return tuple(f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME="))

    cflags, cuda_cflags = split("cflags"), split("cuda_cflags")
    signature = hashlib.sha256(json.dumps([torch.__version__, arch, cflags, cuda_cflags, ldflags,
                                           _tool_version("nvcc"), _tool_version("c++")]).encode()).hexdigest()
    host_signature = hashlib.sha256(json.dumps([torch.__version__, cflags, _tool_version("c++")]).encode()).hexdigest()
    return _TorchFlags(cflags, cuda_cflags, tuple(["-shared", *ldflags]), signature, host_signature)


def shell_quoted(words) -> list[str]:
    """argv words as torch's build wants its flags: it joins them into a shell command line."""
    return [shlex.quote(word) for word in words]


def _drop_missing_libraries(ldflags: list[str]) -> list[str]:
    """A CPU-only torch has no libc10_cuda/libtorch_cuda; leave those out so compile-only builds still link."""
    dirs = [f[2:] for f in ldflags if f.startswith("-L")]
    kept = []
    for flag in ldflags:
        if flag.startswith("-l") and dirs:
            lib = flag[2:]
            if not any(Path(d, f"lib{lib}.so").exists() or Path(d, f"lib{lib}.a").exists() for d in dirs):
                continue
        kept.append(flag)
    return kept


@functools.lru_cache(maxsize=8)
def _tool_version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "missing"


# ---------------------------------------------------------------- generated sources with line maps

@dataclass
class _Chunk:
    text: str
    origin: SourceSegment | None = None  # where the first line came from


@dataclass
class GeneratedFile:
    """A generated translation unit and, per line, the candidate file/line it came from."""

    path: Path
    line_origin: list[tuple[str | None, int | None]]

    @classmethod
    def write(cls, path: Path, chunks: list[_Chunk]) -> "GeneratedFile":
        path.write_text("\n".join(chunk.text for chunk in chunks))
        return cls(path, _line_origins(chunks))

    def origin_of(self, line: int) -> tuple[str | None, int | None]:
        if 1 <= line <= len(self.line_origin):
            return self.line_origin[line - 1]
        return (None, None)


def _line_origins(chunks: list[_Chunk]) -> list[tuple[str | None, int | None]]:
    origins = []
    for chunk in chunks:
        for i in range(chunk.text.count("\n") + 1):
            has = chunk.origin is not None and chunk.origin.file_line is not None
            origins.append((chunk.origin.file, chunk.origin.file_line + i) if has else (None, None))
    return origins


def _segment_chunks(sources: list[str], segments: list[SourceSegment]) -> list[_Chunk]:
    """One chunk per source string; line origins from the segments that make it up (when they line up)."""
    chunks = []
    remaining = list(segments)
    for text in sources:
        parts, consumed = [], ""
        while remaining and len(consumed) < len(text) and text.startswith(consumed + remaining[0].text):
            consumed += remaining[0].text
            parts.append(remaining.pop(0))
        if parts and consumed == text:
            chunks.extend(_Chunk(p.text, p) for p in parts) if len(parts) == 1 else \
                chunks.append(_join_segments(parts))
        else:
            chunks.append(_Chunk(text, None))
    return chunks


def _join_segments(parts: list[SourceSegment]) -> _Chunk:
    # Concatenated pieces: keep the first piece's origin; later lines are approximate only when pieces are
    # not line-aligned, which is rare in practice (kernels written as one string per function).
    return _Chunk("".join(p.text for p in parts), parts[0])


def load_inline_sources(spec: ExtensionSpec) -> tuple[list[_Chunk], list[_Chunk]]:
    """main.cpp and cuda.cu exactly as torch's load_inline writes them, as chunks with line origins."""
    cpp = [] if spec.no_implicit_headers else [_Chunk("#include <torch/extension.h>")]
    cpp += _segment_chunks(spec.cpp_sources, spec.cpp_segments)
    if spec.functions is not None:
        functions = spec.functions if isinstance(spec.functions, dict) else {f: f for f in spec.functions}
        cpp.append(_Chunk("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"))
        bound = "torch::wrap_pybind_function({})" if spec.with_pytorch_error_handling else "{}"
        cpp += [_Chunk(f'm.def("{n}", {bound.format(n)}, "{doc}");') for n, doc in functions.items()]
        cpp.append(_Chunk("}"))
    cuda = []
    if spec.cuda_sources:
        if not spec.no_implicit_headers:
            cuda = [_Chunk("#include <torch/types.h>"), _Chunk("#include <cuda.h>"), _Chunk("#include <cuda_runtime.h>")]
        cuda += _segment_chunks(spec.cuda_sources, spec.cuda_segments)
    return cpp, cuda


# ---------------------------------------------------------------- running compilers with a hard deadline

class CompileTimeout(ValidatorError):
    """A build ran past its deadline (its compilers were killed)."""


def _start_compiler(cmd: list[str], cwd: Path) -> subprocess.Popen:
    """A compiler at a lower CPU priority (nice 10): when compiles fill every core, the worker timing a kernel on
    the GPU still gets its core: host-side stalls distort the wall times that stream and thread tricks are
    judged by."""
    nice = ["nice", "-n", "10"] if _has_nice() else []
    return subprocess.Popen([*nice, *cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=COMPILERS_IN_OWN_GROUP)


@functools.lru_cache(maxsize=1)
def _has_nice() -> bool:
    return shutil.which("nice") is not None


def run_with_deadline(cmd: list[str], deadline: float, cwd: Path) -> tuple[int, str]:
    """Run a compiler in its own process group; on deadline kill the whole group (nvcc spawns cicc/ptxas/gcc)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CompileTimeout()
    proc = _start_compiler(cmd, cwd)
    try:
        out, _ = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        _kill_compiler(proc)
        proc.communicate()
        raise CompileTimeout() from None
    return proc.returncode, out


def run_parallel(commands: list[list[str]], deadline: float, cwd: Path,
                 seconds: list[float] | None = None) -> list[tuple[int, str]]:
    """Run compilers side by side; when one fails the others are stopped (the verdict is already decided), and
    everything is killed at the deadline. `seconds`, when given, receives each command's wall time."""
    started = time.monotonic()
    procs = [_start_compiler(cmd, cwd) for cmd in commands]
    outputs: list[str | None] = [None] * len(procs)
    ended: list[float | None] = [None] * len(procs)
    readers = [threading.Thread(target=_drain, args=(p, outputs, i), daemon=True) for i, p in enumerate(procs)]
    for reader in readers:
        reader.start()
    failed = timed_out = False
    while True:
        states = [p.poll() for p in procs]  # poll every process (any() would stop at the first)
        now = time.monotonic()
        ended = [e if e is not None or state is None else now - started for e, state in zip(ended, states)]
        if None not in states:
            break
        if now > deadline:
            timed_out = True
            break
        if any(p.returncode not in (None, 0) for p in procs):
            failed = True
            break
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            _kill_compiler(p)
            p.wait()
    for reader in readers:
        reader.join()
    if timed_out:
        raise CompileTimeout()
    if seconds is not None:
        seconds.extend(e if e is not None else time.monotonic() - started for e in ended)
    results = []
    for p, out in zip(procs, outputs):
        stopped = failed and p.returncode == -signal.SIGKILL
        results.append((p.returncode, (out or "") + ("\n[stopped: another unit failed]" if stopped else "")))
    return results


def _kill_compiler(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        if COMPILERS_IN_OWN_GROUP:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


def _drain(proc: subprocess.Popen, outputs: list, index: int) -> None:
    outputs[index] = proc.stdout.read()
    proc.stdout.close()


# ---------------------------------------------------------------- compiler message -> candidate line

_GCC_MSG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<sev>fatal error|error|warning|note):\s*(?P<msg>.*)$")
_NVCC_MSG = re.compile(r"^(?P<file>[^(\n]+)\((?P<line>\d+)\):\s*(?P<sev>error|warning|catastrophic error)[^:]*:\s*(?P<msg>.*)$")


def map_diagnostics(log: str, files: list[GeneratedFile]) -> list[Diagnostic]:
    """Parse gcc/nvcc messages; those in generated files are mapped to candidate lines, others (errors in headers
    or the linker) are kept without a line."""
    by_name = {}
    for f in files:
        by_name[str(f.path)] = f
        by_name[f.path.name] = f
    diagnostics, seen = [], set()
    for raw in log.splitlines():
        match = _GCC_MSG.match(raw.strip()) or _NVCC_MSG.match(raw.strip())
        if match:
            severity = "error" if "error" in match.group("sev") else match.group("sev")
            generated = by_name.get(match.group("file")) or by_name.get(Path(match.group("file")).name)
            if generated is None:
                if severity != "error":
                    continue
                file, line, column = match.group("file"), None, None
            else:
                file, line = generated.origin_of(int(match.group("line")))
                col = match.groupdict().get("col")
                column = int(col) if col else None
            key = (file, line, match.group("msg"))
            if key not in seen:
                seen.add(key)
                diagnostics.append(Diagnostic(line, column, severity, match.group("msg").strip(), file))
        elif re.search(r"undefined reference to|ld returned|collect2: error", raw):
            diagnostics.append(Diagnostic(None, None, "error", raw.strip(), None))
    return diagnostics


# ---------------------------------------------------------------- the builder

class ExtensionBuilder:
    """Builds ExtensionSpecs into importable shared objects under the content-addressed cache."""

    def __init__(self, config: CompileConfig | None = None):
        self.config = config or CompileConfig()
        self.arch = resolve_arch(self.config.arch)
        self._setup_lock = threading.Lock()  # one-time set-up: precompiled headers, link stubs
        self._pch_building: set[Path] = set()

    def cache_key(self, spec: ExtensionSpec) -> str:
        flags = self._flags(spec)
        c = self.config
        return hashlib.sha256("\0".join([spec.content_key(), flags.signature, c.mode, str(c.use_pch), c.nvcc,
                                         c.cxx, str(c.link)]).encode()).hexdigest()

    def _flags(self, spec: ExtensionSpec) -> _TorchFlags:
        return torch_flags(self.arch, spec.uses_cuda, tuple(spec.extra_cflags), tuple(spec.extra_cuda_cflags),
                           tuple(spec.extra_ldflags), tuple(spec.extra_include_paths))

    def build(self, spec: ExtensionSpec, timeout_s: float | None = None) -> BuildResult:
        start = time.monotonic()
        limit = timeout_s or self.config.timeout_s
        deadline = start + limit
        key = self.cache_key(spec)
        build_dir = Path(self.config.cache_dir) / key[:2] / key
        build_dir.mkdir(parents=True, exist_ok=True)
        result_file = build_dir / "result.json"
        with _file_lock(build_dir / ".lock"):
            if result_file.exists():
                stored = json.loads(result_file.read_text())
                stored.update(cached=True, seconds=time.monotonic() - start)
                stored["diagnostics"] = [Diagnostic(**d) for d in stored["diagnostics"]]
                return BuildResult(**stored)
            try:
                result = self._build_uncached(spec, build_dir, deadline)
            except CompileTimeout:
                return BuildResult(False, "", None, f"compilation exceeded the {limit:.0f} s limit and was killed",
                                   time.monotonic() - start, timed_out=True,
                                   diagnostics=[Diagnostic(None, None, "error", f"compile timeout after {limit:.0f} s")])
            result.seconds = time.monotonic() - start
            # Timeouts are not cached (they depend on machine load), nor failures for want of a piece of the machine
            # (it may be installed before the next try); successes and real errors are.
            if result.ok or diagnose_build(result.log) is None:
                result_file.write_text(json.dumps(result.to_dict()))
            return result

    def _build_uncached(self, spec: ExtensionSpec, build_dir: Path, deadline: float) -> BuildResult:
        if spec.argument_errors:
            return _argument_failure(spec)
        if self.config.mode == "load_inline" or spec.torch_build_reason:
            result = kernelbench_load_inline(spec, build_dir, self.arch, max(1.0, deadline - time.monotonic()))
            if result.timed_out:
                raise CompileTimeout()
            if spec.torch_build_reason:
                result.log = f"[built by torch's own {'load' if spec.source_paths else 'load_inline'}: " \
                             f"{spec.torch_build_reason}]\n" + result.log
            return result
        flags = self._flags(spec)
        cpp_chunks, cuda_chunks = self._sources(spec)
        # The glue name follows the pybind glue only, so the glue's object file is shared by every candidate with
        # the same declarations (typical for samples of one problem and for kernel-body infills).
        glue_name = _glue_name(cpp_chunks, flags)
        module_name = glue_name
        if self.config.mode == "fast" and not _registers_global_names(spec):
            # A name of its own per build (the build directory is keyed by all sources and flags).
            module_name = f"dice_{build_dir.name[:24]}"
        so_path = build_dir / f"{module_name}.so"
        define = f"-DTORCH_EXTENSION_NAME={glue_name}"
        use_pch = self.config.use_pch and not spec.no_implicit_headers
        log_prefix = ""
        if self.config.mode == "fast" and cuda_chunks and not spec.no_implicit_headers and not spec.source_paths:
            try:
                split = split_host_device(cuda_chunks[3:])
                cubin_flags = _cubin_nvcc_flags(flags.cuda_cflags, self.arch)
                if split.needs_torch_includes:
                    cubin_flags += _torch_include_flags(flags.cuda_cflags)
            except SplitError as why:
                log_prefix = f"[fast path not used: {why}]\n"
            else:
                # load_inline's own prelude of CUDA sources (torch/types.h, cuda.h, cuda_runtime.h): the host code
                # sees exactly the declarations it sees in the KernelBench layout.
                bindings = None if module_name == glue_name else signature_bindings(spec)
                for host in _host_variants(split.host):
                    result = self._build_split(module_name, glue_name, build_dir, so_path, deadline, flags, use_pch,
                                               cpp_chunks, cuda_chunks[:3] + host, split.device, cubin_flags,
                                               bindings)
                    if result.ok or _kernel_error_is_final(result) or not _may_need_frontend(result):
                        break
                if result.ok or _kernel_error_is_final(result):
                    return result
                log_prefix = "[fast path failed; result below is from the load_inline layout]\n"
        result = self._compile_and_link(module_name, glue_name, build_dir, so_path, deadline, flags, define,
                                        use_pch, self._full_units(spec, cpp_chunks, cuda_chunks), strategy="full")
        result.log = log_prefix + result.log
        return result

    def _build_split(self, module_name, glue_name, build_dir, so_path, deadline, flags, use_pch, cpp_chunks,
                     host_chunks, device_chunks, cubin_flags, bindings) -> BuildResult:
        """The split layout with one host unit: the pybind11 glue (main.cpp) bound by signature when the
        declarations allow it (one glue object for every candidate with these function types), else load_inline's
        main.cpp with the light prelude, and as load_inline writes it if only that glue fails (its C++ needs more
        of torch). Returns the last attempt."""
        options = [(glue, glue_name, host_chunks, None) for glue in _glue_variants(cpp_chunks)]
        if bindings:
            glue = _signature_glue(bindings)
            options.insert(0, (glue, _glue_name(glue, flags), host_chunks + [_binding_aliases(bindings)], bindings))
        for glue_chunks, unit_glue_name, host, bound in options:
            units = [("main.cpp", glue_chunks, "cxx"), ("host.cpp", host, "cxx"),
                     ("kernels.cu", device_chunks, "cubin")]
            result = self._compile_and_link(module_name, unit_glue_name, build_dir, so_path, deadline, flags,
                                            f"-DTORCH_EXTENSION_NAME={unit_glue_name}", use_pch, units,
                                            strategy="split", cubin_flags=cubin_flags, bindings=bound)
            if result.ok or _kernel_error_is_final(result):
                break
            # The signature glue only speeds things up: a failure that may come from it (an error without a
            # candidate line, e.g. in the generated pointers) is retried with load_inline's glue; errors in the
            # candidate's own lines end the attempt.
            errors = [d for d in result.diagnostics if d.severity == "error"]
            if bound is not None and errors and all(d.line is not None for d in errors):
                break
            if bound is None and result.failed_units != ["main.cpp"]:
                break
        return result

    def _sources(self, spec: ExtensionSpec) -> tuple[list[_Chunk], list[_Chunk]]:
        if not spec.source_paths:
            return load_inline_sources(spec)
        # load(sources=[...]): each file's text as is; their folders go on the include path.
        return _segment_chunks(spec.cpp_sources, spec.cpp_segments), _segment_chunks(spec.cuda_sources,
                                                                                      spec.cuda_segments)

    @staticmethod
    def _full_units(spec: ExtensionSpec, cpp_chunks: list[_Chunk], cuda_chunks: list[_Chunk]) -> list:
        """The units of the load_inline layout: main.cpp and cuda.cu as load_inline writes them, or for
        `load(sources=[...])` one unit per file, as torch compiles them (two files are never one unit)."""
        if not spec.source_paths:
            return [("main.cpp", cpp_chunks, "cxx")] + ([("cuda.cu", cuda_chunks, "nvcc")] if cuda_chunks else [])
        return [(name, [_Chunk(file.text, file)], "nvcc" if file.file.endswith(CUDA_SUFFIXES) else "cxx")
                for name, file in zip(source_unit_names(spec), spec.source_files())]

    def _compile_and_link(self, module_name, glue_name, build_dir, so_path, deadline, flags, define, use_pch,
                          units, strategy, cubin_flags: list[str] | None = None,
                          bindings: list["Binding"] | None = None) -> BuildResult:
        """Compile the units side by side (objects come from the object cache when unchanged), then the module
        file (init shim, embedded cubin and the names of a signature glue's bindings, when any), then link."""
        files, commands, objects = [], [], []
        include_dirs = sorted({str(Path(p).parent) for p in self._source_paths_of(units)})
        extra_inc = [f"-I{d}" for d in include_dirs]
        cubin: Path | None = None
        for name, chunks, tool in units:
            if not any(c.text.strip() for c in chunks):
                continue  # e.g. the empty main.cpp of a bare .cu file
            generated = GeneratedFile.write(build_dir / name, chunks)
            files.append(generated)
            cmd, obj = self._unit_command(generated.path, tool, flags, define, extra_inc, use_pch, cubin_flags)
            if tool == "cubin":
                cubin = obj
            else:
                objects.append(str(obj))
            commands.append((cmd, obj, name))
        unit_seconds: dict[str, float] = {}
        pending, outcomes, reused = self._compile_missing(commands, deadline, build_dir, unit_seconds)
        log = "\n".join(f"$ {shlex.join(map(str, c))}\n{out}" for (c, _, _), (_, out) in zip(pending, outcomes))
        ok = all(rc == 0 for rc, _ in outcomes)
        failed_units = [name for (_, _, name), (rc, out) in zip(pending, outcomes)
                        if rc != 0 and not out.endswith("[stopped: another unit failed]")]
        compiled = [name for _, _, name in pending]
        if ok and module_name != glue_name:
            # The init shim (and the cubin) in a tiny unit of its own: no headers, milliseconds to compile.
            module_file = build_dir / "module.cpp"
            module_file.write_text(_module_source(module_name, glue_name, cubin, bindings))
            obj = build_dir / "module.cpp.o"
            cmd = [self.config.cxx, "-fPIC", "-c", module_file.name, "-o", obj.name]
            objects.append(str(obj))
            if self._from_object_cache(cmd, module_file.read_bytes(), obj):
                reused.append(module_file.name)
            else:
                compiled.append(module_file.name)
                rc, out = self._run_units([(cmd, obj, module_file.name)], deadline, build_dir, unit_seconds)[0]
                log += f"\n$ {shlex.join(cmd)}\n{out}"
                ok = rc == 0
                failed_units += [] if ok else [module_file.name]
        if ok and self.config.link:
            linking = time.monotonic()
            stubs = self._link_stubs(flags)
            for linker in dict.fromkeys((_fast_linker(), ())):  # gold when present; the default if gold fails
                link = [self.config.cxx, *linker, *objects, *stubs, *flags.ldflags, "-o", so_path.name]
                rc, out = run_with_deadline(link, deadline, build_dir)
                log += f"\n$ {shlex.join(link)}\n{out}"
                if rc == 0:
                    break
            unit_seconds["link"] = round(time.monotonic() - linking, 3)
            ok = rc == 0
        diagnostics = map_diagnostics(log, files) if not ok or "warning" in log else []
        return BuildResult(ok, module_name, str(so_path) if ok and self.config.link else None, log, 0.0,
                           strategy=strategy, diagnostics=diagnostics, failed_units=failed_units,
                           compiled_units=compiled, reused_units=reused, unit_seconds=unit_seconds)

    def _unit_command(self, source: Path, tool: str, flags: "_TorchFlags", define: str, extra_inc: list[str],
                      use_pch: bool, cubin_flags: list[str] | None) -> tuple[list[str], Path]:
        """The compile command of one unit (run in its folder) and its output file."""
        name, obj = source.name, source.parent / (source.name + ".o")
        if tool == "cxx":
            text = source.read_text()
            pch = self._pch_flags(flags, _leading_pch_headers(text), _pch_base(text)) if use_pch else []
            return [self.config.cxx, *flags.cflags, define, *extra_inc, *pch, "-c", name, "-o", obj.name], obj
        if tool == "nvcc":
            return [self.config.nvcc, *flags.cuda_cflags, define, *extra_inc, "-c", name, "-o", obj.name], obj
        # device code only, no torch: CUDA include paths, macros and codegen flags for one GPU target
        obj = source.parent / "kernels.cubin"
        return [self.config.nvcc, *cubin_flags, *extra_inc, "-cubin", name, "-o", obj.name], obj

    def _compile_missing(self, commands: list[tuple[list[str], Path, str]], deadline: float, build_dir: Path,
                         unit_seconds: dict[str, float]) -> tuple[list, list[tuple[int, str]], list[str]]:
        """Take each unit's object from the object cache, or compile the missing ones side by side; returns the
        compiled units, their outcomes and the names of the reused ones. Each object is looked up and made under
        a lock of its own, so concurrent builds that share a unit (a signature glue: the first candidates of one
        function type arrive together) compile it once, the others waiting for it, instead of all at once."""
        keys = sorted({self._object_cache_path(cmd, (build_dir / name).read_bytes()) for cmd, _, name in commands})
        with contextlib.ExitStack() as locks:
            for key in keys:  # in one order in every build, so two builds never wait for each other
                locks.enter_context(_file_lock(key.with_suffix(".lock")))
            pending = [(cmd, obj, name) for cmd, obj, name in commands
                       if not self._from_object_cache(cmd, (build_dir / name).read_bytes(), obj)]
            outcomes = self._run_units(pending, deadline, build_dir, unit_seconds)
        compiled = {name for _, _, name in pending}
        return pending, outcomes, [name for _, _, name in commands if name not in compiled]

    def _from_object_cache(self, cmd: list[str], text: bytes, obj: Path) -> bool:
        cached_obj = self._object_cache_path(cmd, text)
        if cached_obj.exists():
            shutil.copyfile(cached_obj, obj)
            return True
        return False

    def _run_units(self, pending: list[tuple[list[str], Path, str]], deadline: float, build_dir: Path,
                   unit_seconds: dict[str, float]) -> list[tuple[int, str]]:
        """Compile side by side; store each successful output in the object cache (keyed by command and text)."""
        seconds: list[float] = []
        outcomes = run_parallel([cmd for cmd, _, _ in pending], deadline, build_dir, seconds) if pending else []
        unit_seconds.update((name, round(t, 3)) for (_, _, name), t in zip(pending, seconds))
        for (cmd, obj, name), (rc, _) in zip(pending, outcomes):
            if rc == 0:
                cached_obj = self._object_cache_path(cmd, (build_dir / name).read_bytes())
                cached_obj.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached_obj.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
                shutil.copyfile(obj, tmp)
                tmp.replace(cached_obj)
        return outcomes

    def _object_cache_path(self, cmd: list[str], text: bytes) -> Path:
        # The precompiled header only speeds a unit up (it holds the headers the unit includes first, in the same
        # order), so an object built before the header was ready stays valid once it is: the key leaves it out.
        cmd = _without_pch_flags([str(c) for c in cmd])
        key = hashlib.sha256(json.dumps(cmd).encode() + b"\0" + text).hexdigest()
        return Path(self.config.cache_dir) / "obj" / key[:2] / f"{key}.o"

    @staticmethod
    def _source_paths_of(units) -> list[str]:
        return [c.origin.file for _, chunks, _ in units for c in chunks
                if c.origin is not None and c.origin.file and c.origin.file.endswith((".cu", ".cuh", ".cpp", ".h"))]

    def _pch_flags(self, flags: _TorchFlags, extra_headers: tuple[str, ...],
                   base: str = FULL_TORCH_HEADER) -> list[str]:
        """Flags that make g++ use a precompiled torch header `base` (plus the CUDA headers the unit includes before
        any code). A missing header is built in the background; until then units compile without it, so the
        first verdict never waits for it."""
        pch_dir = self._pch_dir(flags, extra_headers, base)
        if (pch_dir / f"{PCH_HEADER}.gch").exists():
            return ["-I", str(pch_dir), "-include", PCH_HEADER, "-Winvalid-pch"]
        with self._setup_lock:
            if pch_dir not in self._pch_building and not (pch_dir / "failed").exists():
                self._pch_building.add(pch_dir)
                threading.Thread(target=self.build_pch, args=(flags, extra_headers, base), daemon=True).start()
        return []

    def _pch_dir(self, flags: _TorchFlags, extra_headers: tuple[str, ...], base: str = FULL_TORCH_HEADER) -> Path:
        suffix = hashlib.sha256("|".join(extra_headers).encode()).hexdigest()[:8] if extra_headers else "base"
        if base != FULL_TORCH_HEADER:
            suffix += "-" + re.sub(r"\W", "_", base)
        return Path(self.config.cache_dir) / "pch" / f"{flags.host_signature[:32]}-{suffix}"

    def _link_stubs(self, flags: _TorchFlags) -> list[str]:
        """Linker flags that put empty stand-ins of the torch and CUDA libraries first on the search path: each has
        its library's soname and no symbols, so the extension records the same needed libraries (resolved when it is
        imported into a process that loaded torch, as before) while the linker skips reading the real libraries'
        symbol tables, most of a link's time (~0.3 s of ~0.35 s on the H200 machine). [] where they cannot be
        made; the link then reads the real libraries."""
        folder = Path(self.config.cache_dir) / "link-stubs" / flags.signature[:32]
        ready, failed = folder / "ready", folder / "failed"
        if not ready.exists() and not failed.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with self._setup_lock, _file_lock(folder / ".lock"):
                if not ready.exists() and not failed.exists():
                    (ready if _make_link_stubs(folder, flags.ldflags, self.config.cxx) else failed).touch()
        return ["-Wl,--no-as-needed", f"-L{folder}"] if ready.exists() else []

    def prepare_common_headers(self) -> list[bool]:
        """Precompile the torch headers most candidates start with (a one-time cost per machine and torch)."""
        flags = torch_flags(self.arch, True, (), (), (), ())
        # The split pybind glue (main.cpp) starts with the light header and torch's pybind11 header (the full
        # header alone when that fails, and in the load_inline layout); split host units with the light one and
        # cuda_runtime.h, often with one of torch's CUDA headers. Rarer combinations are built when first needed.
        light_extras = (GLUE_HEADERS, ("cuda_runtime.h",), ("c10/cuda/CUDAStream.h", "cuda_runtime.h"),
                        ("ATen/cuda/CUDAContext.h", "cuda_runtime.h"))
        variants = [(LIGHT_TORCH_HEADER, h) for h in light_extras] + [(FULL_TORCH_HEADER, ())]
        # Side by side: each is one single-threaded g++ run of ~25 s (one after another they took 123 s of a
        # fresh H200 machine's 10-minute command).
        ready = _side_by_side(lambda variant: self.build_pch(flags, variant[1], variant[0]), variants)
        self.prebuild_signature_glues(COMMON_SIGNATURES)
        return ready

    def prebuild_signature_glues(self, signatures: list[tuple[str, tuple[str, ...]]]) -> list[bool]:
        """Compile the signature glue of each (result type, parameter types) of a one-function extension into the
        object cache, with the command a default build of such a candidate uses; True where it is there."""
        flags = torch_flags(self.arch, True, (), (), (), ())

        def prebuild(signature: tuple[str, tuple[str, ...]]) -> bool:
            result, params = signature
            glue = _signature_glue([Binding("f", "f", result, params, "f")])  # the text does not name the function
            name = _glue_name(glue, flags)
            folder = Path(self.config.cache_dir) / "glue" / name
            folder.mkdir(parents=True, exist_ok=True)
            with _file_lock(folder / ".lock"):
                source = GeneratedFile.write(folder / "main.cpp", glue).path
                cmd, obj = self._unit_command(source, "cxx", flags, f"-DTORCH_EXTENSION_NAME={name}", [],
                                              self.config.use_pch, None)
                self._compile_missing([(cmd, obj, source.name)], time.monotonic() + self.config.timeout_s, folder, {})
                return self._object_cache_path(cmd, source.read_bytes()).exists()

        return _side_by_side(prebuild, signatures)

    def build_pch(self, flags: _TorchFlags | None = None, extra_headers: tuple[str, ...] = (),
                  base: str = FULL_TORCH_HEADER) -> bool:
        """Build one precompiled header now (idempotent; safe across processes). Returns True when usable."""
        flags = flags or torch_flags(self.arch, True, (), (), (), ())
        pch_dir = self._pch_dir(flags, extra_headers, base)
        gch = pch_dir / f"{PCH_HEADER}.gch"
        pch_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(pch_dir / ".lock"):
            if gch.exists():
                return True
            header = pch_dir / PCH_HEADER
            header.write_text("".join(f"#include <{h}>\n" for h in (base, *extra_headers)))
            tmp = pch_dir / f"tmp{os.getpid()}.{threading.get_ident()}.gch"
            compile_cmd = shlex.join([self.config.cxx, *flags.cflags, "-x", "c++-header", str(header), "-o", str(tmp)])
            # The rename happens in the shell, so a header whose builder process exits early still lands.
            script = f"{compile_cmd} > {shlex.quote(str(tmp))}.log 2>&1 && mv {shlex.quote(str(tmp))} " \
                     f"{shlex.quote(str(gch))} || mv {shlex.quote(str(tmp))}.log {shlex.quote(str(pch_dir / 'failed'))}"
            try:
                run_with_deadline(["sh", "-c", script], time.monotonic() + 600, pch_dir)
            except CompileTimeout:
                return False
            return gch.exists()


def _make_link_stubs(folder: Path, ldflags: tuple[str, ...], cxx: str) -> bool:
    """One empty shared library per `-lNAME` of `ldflags`, named as the real one and with its soname."""
    dirs = [f[2:] for f in ldflags if f.startswith("-L")]
    for name in (f[2:] for f in ldflags if f.startswith("-l")):
        real = next((Path(d, f"lib{name}.so") for d in dirs if Path(d, f"lib{name}.so").exists()), None)
        if real is None:
            continue  # a system library: found as before
        try:
            dynamic = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True, timeout=60)
            soname = re.search(r"Library soname: \[([^\]]+)\]", dynamic.stdout)
            made = soname and subprocess.run([cxx, "-shared", "-x", "c++", "/dev/null", f"-Wl,-soname,{soname[1]}",
                                              "-o", str(folder / f"lib{name}.so")], capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        if not made or made.returncode != 0:
            return False
    return True


@functools.lru_cache(maxsize=1)
def _fast_linker() -> tuple[str, ...]:
    """gold when installed: it links an extension against libtorch in about half the time of the default
    bfd linker (0.23 s against 0.55 s on this project's CPU machine), a fifth of a kernel-body infill's build."""
    return ("-fuse-ld=gold",) if shutil.which("ld.gold") else ()


def _kernel_error_is_final(result: BuildResult) -> bool:
    """A split build that failed only in the torch-free kernels file holds the user's device code verbatim, so
    its errors are the candidate's own; errors about unknown names could come from the split and are rechecked
    in the load_inline layout, as are host-side failures."""
    if result.failed_units != ["kernels.cu"]:
        return False
    errors = [d for d in result.diagnostics if d.severity == "error"]
    if not any(d.line is not None for d in errors):
        return False
    return not any(re.search(r"is undefined|was not declared|not a template|incomplete type", d.message)
                   for d in errors)


def _may_need_frontend(result: BuildResult) -> bool:
    """Whether a split build's host unit failed in a way the C++-frontend headers could fix (an unknown name or
    overload), so it is worth building as written; other errors go straight to the load_inline layout."""
    unknown = r"not declared|not been declared|not a member|does not name|no matching|not a template|incomplete type"
    return "host.cpp" in result.failed_units and any(re.search(unknown, d.message) for d in result.diagnostics
                                                     if d.severity == "error")


# Headers worth precompiling along with the torch header a unit starts with, when it includes them up front: torch's
# CUDA headers, and the pybind11 glue's light prelude.
GLUE_HEADERS = ("torch/csrc/utils/pybind.h", "torch/csrc/Exceptions.h")  # casters; wrap_pybind_function
PCH_EXTRA_HEADERS = ("ATen/cuda/CUDAContext.h", "c10/cuda/CUDAStream.h", "c10/cuda/CUDAGuard.h", "cuda_runtime.h",
                     *GLUE_HEADERS)


_FRONTEND_INCLUDE = re.compile(r"#\s*include\s*[<\"]torch/(extension|torch|all|python)\.h[>\"]")


def _glue_variants(cpp_chunks: list[_Chunk]) -> list[list[_Chunk]]:
    """main.cpp texts to try, fastest first: load_inline's main.cpp with torch/types.h and torch's pybind11 headers
    (pybind11 with its STL casters, torch's type casters and wrap_pybind_function: what torch/extension.h gives the
    bindings), then as load_inline writes it. torch/extension.h's C++ frontend leaves g++ so many pending template
    instantiations that even an empty file takes ~12 s with a precompiled header on this project's CPU machine,
    against ~7 s with the light prelude (same bindings, same conversions)."""
    if not cpp_chunks or cpp_chunks[0].text != f"#include <{FULL_TORCH_HEADER}>":
        return [cpp_chunks]
    if _FRONTEND_INCLUDE.search("\n".join(c.text for c in cpp_chunks[1:])):
        return [cpp_chunks]  # the sources include the full header themselves: its precompiled form is the fast one
    light = [_Chunk(f"#include <{h}>") for h in (LIGHT_TORCH_HEADER, *GLUE_HEADERS)] + cpp_chunks[1:]
    return [light, cpp_chunks]


def _host_variants(host: list[_Chunk]) -> list[list[_Chunk]]:
    """Host-unit texts to try, fastest first: without the C++-frontend includes (torch/extension.h and the like),
    then as written. Host code beside kernels rarely needs more than the prelude's torch/types.h (tensors, ATen,
    factories, TORCH_CHECK), and torch/extension.h costs a g++ unit ~3x its time, precompiled or not (see
    FULL_TORCH_HEADER). Code that needs the frontend fails to compile without it and is built as written. Each
    include is blanked in place, so line numbers stay the candidate's."""
    light = [_Chunk(_FRONTEND_INCLUDE.sub("", c.text), c.origin) for c in host]
    return [light, host] if any(a.text != b.text for a, b in zip(light, host)) else [host]


def _glue_name(glue_chunks: list[_Chunk], flags: "_TorchFlags") -> str:
    """The glue's extension name: a hash of its text and flags, so equal glues share one object file."""
    digest = hashlib.sha256(("\n".join(c.text for c in glue_chunks) + flags.host_signature).encode()).hexdigest()
    return f"dice_{digest[:24]}"


# ---------------------------------------------------------------- bindings by signature

# Types a signature glue spells without the candidate's code: what load_inline-style declarations use.
_PLAIN_TYPE = (r"(?:torch::Tensor|at::Tensor|long long|long|unsigned int|unsigned|int64_t|int32_t|uint64_t|uint32_t"
               r"|int|size_t|float|double|bool)")
_BINDABLE_TYPE = re.compile(rf"(?:const )?(?:{_PLAIN_TYPE}|std::vector<{_PLAIN_TYPE}>)(?: const)?(?: &)?")
# The load_inline idioms — `torch::Tensor f(torch::Tensor a, ...)`, tensors by const reference, tensors then one
# scalar (an eps, a dim, a scale) — are compiled by prepare_common_headers too, so the first candidate of such a
# shape does not wait for its glue (a glue's build costs as much as the host unit's).
_TENSOR, _CONST_TENSOR = "torch::Tensor", "const torch::Tensor &"
COMMON_SIGNATURES = ([(_TENSOR, (_TENSOR,) * n) for n in range(1, 5)]
                     + [(_TENSOR, (_CONST_TENSOR,) * n) for n in range(1, 4)]
                     + [(_TENSOR, (_TENSOR,) * n + (scalar,)) for n in range(1, 4)
                        for scalar in ("double", "float", "int", "int64_t")])
BINDING_NAMES = "dice_binding_names"  # defined by the build's module.cpp: name, docstring, name, docstring, ...
BINDING_POINTER = "dice_binding_"  # + index: the host unit's pointer to the bound function


@dataclass(frozen=True)
class Binding:
    """One bound function as a signature glue binds it: of `functions=[...]` (through torch's
    wrap_pybind_function, as load_inline's generated module binds it) or of the candidate's own `PYBIND11_MODULE`
    (as its `m.def` binds it: directly)."""

    name: str  # the Python name
    doc: str
    result: str
    params: tuple[str, ...]
    function: str  # the C++ function
    wrapped: bool = True

    def pointer_declarator(self, index: int) -> str:
        return f"{self.result} (*const {BINDING_POINTER}{index})({', '.join(self.params)})"


def signature_bindings(spec: ExtensionSpec) -> list[Binding] | None:
    """The functions to bind when the C++ sources are only declarations of them (and torch includes, and at most a
    `PYBIND11_MODULE` of plain `m.def`s when `functions` is not given) whose types all appear in _BINDABLE_TYPE, and
    the CUDA sources define them plainly: then the pybind glue needs no name of the candidate's, only the types.
    None otherwise."""
    if spec.no_implicit_headers or spec.source_paths:
        return None
    text = _without_comments("\n".join(spec.cpp_sources))
    text = re.sub(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/(extension|types)\.h[>\"][ \t]*$", " ", text, flags=re.M)
    if spec.functions is None:  # the candidate's own module block, or nothing to bind
        found = _pybind_module_defs(text)
        if found is None:
            return None
        text, defs = found
        wrapped = False
    elif not spec.with_pytorch_error_handling:  # then load_inline binds without wrap_pybind_function
        return None
    else:
        functions = spec.functions if isinstance(spec.functions, dict) else {f: f for f in spec.functions}
        defs = [(name, name, str(doc)) for name, doc in functions.items()]
        wrapped = True
    if re.search(r"[#{}]", text):
        return None
    declared: dict[str, tuple[str, tuple[str, ...]]] = {}
    for declaration in filter(None, (" ".join(d.split()) for d in text.split(";"))):
        match = re.fullmatch(r"(.+?)\b(\w+) ?\((.*)\)", declaration)
        result = match and _bindable_type(match.group(1), allow_void=True)
        params = match and _bindable_params(match.group(3))
        if not match or result is None or params is None or match.group(2) in declared:
            return None
        declared[match.group(2)] = (result, params)
    functions = {function for _, function, _ in defs}
    if not defs or any(function not in declared for function in functions):
        return None
    # Definitions load_inline cannot bind from main.cpp (internal linkage, C linkage, not emitted, a template, in a
    # namespace a using-directive opens) while the address taken in the host unit could: keep those on
    # load_inline's glue, for the same verdict.
    cuda = "\n".join(spec.cuda_sources)
    if re.search(r'extern\s*"C"|\bnamespace\b|\bPYBIND11_MODULE\b', cuda) or any(
            re.search(rf"\b(static|\w*inline\w*|template)\b[^;{{}}]*?\b{name}\s*\(", cuda) for name in functions):
        return None
    return [Binding(name, doc, *declared[function], function=function, wrapped=wrapped)
            for name, function, doc in defs]


_C_STRING = r'"(?:[^"\\\n]|\\.)*"'
_C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\"}


def _without_comments(text: str) -> str:
    """C++ text with its comments blanked; string literals (which may hold `//`) are kept."""
    return re.sub(rf"({_C_STRING})|/\*.*?\*/|//[^\n]*", lambda m: m.group(1) or " ", text, flags=re.S)


def _pybind_module_defs(text: str) -> tuple[str, list[tuple[str, str, str]]] | None:
    """The text without its one `PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {...}` block, and the (Python name, C++
    function, docstring) of each `m.def("name", &function[, "doc"]);` in it; None when the block holds anything
    else (keyword arguments, lambdas, classes, other statements) or is not there."""
    head = re.search(r"\bPYBIND11_MODULE\s*\(\s*TORCH_EXTENSION_NAME\s*,\s*(\w+)\s*\)\s*\{", text)
    if head is None or "PYBIND11_MODULE" in text[head.end():]:
        return None
    statement = re.compile(rf"\s*{head.group(1)}\s*\.\s*def\s*\(\s*({_C_STRING})\s*,\s*&?\s*(\w+)\s*"
                           rf"(?:,\s*({_C_STRING})\s*)?\)\s*;")
    defs, position = [], head.end()
    while match := statement.match(text, position):
        name, doc = _c_string_value(match.group(1)), _c_string_value(match.group(3) or '""')
        if name is None or doc is None or any(name == seen for seen, _, _ in defs):  # a repeat is an overload
            return None
        defs.append((name, match.group(2), doc))
        position = match.end()
    end = re.compile(r"\s*\}").match(text, position)
    if end is None or not defs:
        return None
    return text[:head.start()] + " " + text[end.end():], defs


def _c_string_value(literal: str) -> str | None:
    """The value of a C string literal with only simple escapes; None for any other escape."""
    parts = re.split(r"\\(.)", literal[1:-1])
    if any(escape not in _C_ESCAPES for escape in parts[1::2]):
        return None
    return "".join(part if i % 2 == 0 else _C_ESCAPES[part] for i, part in enumerate(parts))


def _bindable_type(text: str, allow_void: bool = False) -> str | None:
    """`text` in canonical spelling when a signature glue can spell it, else None."""
    canonical = re.sub(r" ?& ?", " &", re.sub(r" ?([<>]) ?", r"\1", " ".join(text.split()))).strip()
    if allow_void and canonical == "void":
        return canonical
    return canonical if _BINDABLE_TYPE.fullmatch(canonical) else None


def _bindable_params(text: str) -> tuple[str, ...] | None:
    """Parameter types without names and default values, or None when one is not bindable."""
    if text.strip() in ("", "void"):
        return ()
    params = []
    for param in split_top_commas(text):
        param = param.split("=")[0].strip()
        kind = _bindable_type(param)
        if kind is None:  # drop a parameter name
            named = re.fullmatch(r"(.*?[\s&>])(\w+)", param)
            kind = named and _bindable_type(named.group(1))
        if kind is None:
            return None
        params.append(kind)
    return tuple(params)


def _signature_glue(bindings: list[Binding]) -> list[_Chunk]:
    """pybind11 glue binding each function through a pointer the host unit defines, under names the module file
    defines: its text follows the signatures only, so its object file serves every candidate with these types."""
    lines = [f"#include <{h}>" for h in (LIGHT_TORCH_HEADER, *GLUE_HEADERS)]
    lines.append("#pragma GCC visibility push(hidden)")  # resolved inside this extension, never across two
    lines.append(f'extern "C" const char* const {BINDING_NAMES}[];')
    lines += [f"extern {b.pointer_declarator(i)};" for i, b in enumerate(bindings)]
    lines.append("#pragma GCC visibility pop")
    lines.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
    for i, binding in enumerate(bindings):
        # A non-const copy: torch::wrap_pybind_function reads the arity from a plain function pointer type.
        lines.append(f"    auto function_{i} = {BINDING_POINTER}{i};")
        bound = f"torch::wrap_pybind_function(function_{i})" if binding.wrapped else f"function_{i}"
        lines.append(f"    m.def({BINDING_NAMES}[{2 * i}], {bound}, {BINDING_NAMES}[{2 * i + 1}]);")
    lines.append("}")
    return [_Chunk("\n".join(lines))]


def _binding_aliases(bindings: list[Binding]) -> _Chunk:
    """Host-unit lines defining the signature glue's pointers: the address of each bound function (so a
    declaration that does not match the definition fails to compile, as it fails to link in load_inline)."""
    lines = ["#pragma GCC visibility push(hidden)"]
    for i, b in enumerate(bindings):
        lines.append(f"extern {b.pointer_declarator(i)};")
        lines.append(f"{b.pointer_declarator(i)} = &{b.function};")
    lines.append("#pragma GCC visibility pop")
    return _Chunk("\n".join(lines))


def _c_string(text: str) -> str:
    """A C string literal of `text` (UTF-8; everything but plain printable ASCII as octal escapes)."""
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\?' else f"\\{b:03o}" for b in text.encode())
    return f'"{body}"'


def _without_pch_flags(cmd: list[str]) -> list[str]:
    """cmd without the five flags _pch_flags adds (-I DIR -include PCH_HEADER -Winvalid-pch)."""
    for i in range(len(cmd) - 4):
        if cmd[i] == "-I" and cmd[i + 2:i + 5] == ["-include", PCH_HEADER, "-Winvalid-pch"]:
            return cmd[:i] + cmd[i + 5:]
    return cmd


def _pch_base(text: str) -> str:
    """The torch header a unit starts with (the precompiled header's base)."""
    match = re.search(r"#\s*include\s*<(torch/[\w/]+\.h)>", text)
    return LIGHT_TORCH_HEADER if match and match.group(1) == LIGHT_TORCH_HEADER else FULL_TORCH_HEADER


def _leading_pch_headers(text: str) -> tuple[str, ...]:
    """The PCH_EXTRA_HEADERS a unit includes before its first line of code (so precompiling them together with
    torch/extension.h cannot change what the unit means), in a canonical order."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    found = set()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if not stripped.startswith("#"):
            break
        match = re.match(r"#\s*include\s*[<\"]([^>\"]+)[>\"]", stripped)
        if match and match.group(1) in PCH_EXTRA_HEADERS:
            found.add(match.group(1))
    return tuple(h for h in PCH_EXTRA_HEADERS if h in found)


def _registers_global_names(spec: ExtensionSpec) -> bool:
    """Bindings that register process-wide names (pybind11 classes, torch operator libraries) clash when two
    builds of one problem are imported into one process; such builds keep the glue name as their module name, so
    a warm worker that already holds one is replaced (see api.ValidatorPool._gpu_stage)."""
    text = "\n".join([*spec.cpp_sources, *spec.cuda_sources])
    return re.search(r"\bclass_\s*<|\bTORCH_LIBRARY|\benum_\s*<|\bregister_exception\b", text) is not None


def _module_source(module_name: str, glue_name: str, cubin: Path | None,
                   bindings: list["Binding"] | None = None) -> str:
    """`PyInit_<module>` forwarding to the glue's `PyInit_<glue>`, plus the cubin's bytes (with its hash in a
    comment, so the object cache, keyed by this text, never serves another cubin's object) and, for a signature
    glue, the Python names and docstrings of its bindings. Sound for multi-phase init (pybind11 3: the def is
    bound to the import spec, so `__name__` is the module name) and for single-phase init (older pybind11: the
    module keeps the glue's `__name__`; the import system files it under the spec name). The glue's init is a weak
    reference: a glue without a Python module (no PyInit) still loads."""
    lines = ["typedef struct _object PyObject;",
             f'extern "C" __attribute__((weak)) PyObject* PyInit_{glue_name}();',
             f'extern "C" __attribute__((visibility("default"))) PyObject* PyInit_{module_name}() {{',
             f"    return PyInit_{glue_name} ? PyInit_{glue_name}() : nullptr;",
             "}"]
    if bindings:
        names = ", ".join(_c_string(text) for b in bindings for text in (b.name, b.doc))
        lines.append(f'extern "C" __attribute__((visibility("hidden"))) const char* const {BINDING_NAMES}[] = '
                     f'{{{names}}};')
    if cubin is not None:
        digest = hashlib.sha256(cubin.read_bytes()).hexdigest()
        lines += [f"// {cubin.name} sha256 {digest}",
                  f'__asm__(".section .rodata\\n.balign 64\\n.globl {CUBIN_SYMBOL}\\n.hidden {CUBIN_SYMBOL}\\n'
                  f'.type {CUBIN_SYMBOL}, @object\\n{CUBIN_SYMBOL}:\\n.incbin \\"{cubin.name}\\"\\n.byte 0\\n'
                  f'.size {CUBIN_SYMBOL}, . - {CUBIN_SYMBOL}\\n.previous\\n");']
    return "\n".join(lines) + "\n"


_ARCH_FLAG = re.compile(r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)(=(.*))?$")


def _cubin_nvcc_flags(cuda_cflags: tuple[str, ...], arch: str) -> list[str]:
    """Flags for `nvcc -cubin` of the kernels file: the torch-free flags of the load_inline build with its GPU
    targets reduced to one `-arch=sm_XY` (the one real target the candidate asked for, else the local arch).
    SplitError when the flags cannot give one loadable cubin (several real targets, relocatable device code)."""
    kept, targets, values = [], set(), iter(_lite_nvcc_flags(cuda_cflags))
    for flag in values:
        match = _ARCH_FLAG.match(flag)
        if match:
            value = match.group(3) if match.group(2) else next(values, "")
            if value in ("native", "all", "all-major"):
                raise SplitError(f"GPU target '{value}' is not one cubin target")
            targets.update(re.findall(r"sm_\w+", value))
            continue
        if re.match(r"^(-rdc|--relocatable-device-code|-dc|--device-c|-dlink|--device-link|-lib)\b", flag):
            raise SplitError(f"'{flag}' needs device linking")
        kept.append(flag)
    if len(targets) > 1:
        raise SplitError(f"several GPU targets ({', '.join(sorted(targets))})")
    return kept + [f"-arch={targets.pop() if targets else arch}"]


def _torch_include_flags(cuda_cflags: tuple[str, ...]) -> list[str]:
    """The torch include directories of the load_inline build (for a kernels file that includes c10's half types)."""
    flags = []
    for flag, path in zip(cuda_cflags, cuda_cflags[1:]):
        if flag == "-isystem" and "torch" in path:
            flags += [flag, path]
    return flags


def _lite_nvcc_flags(cuda_cflags: tuple[str, ...]) -> list[str]:
    """nvcc flags for a torch-free kernels file: arch, macros and the CUDA include dir; no torch/Python includes."""
    kept, skip_next = [], False
    for i, f in enumerate(cuda_cflags):
        if skip_next:
            skip_next = False
            continue
        if f == "-isystem":
            path = cuda_cflags[i + 1]
            skip_next = True
            if "torch" in path or "python" in path.lower():
                continue
            kept += [f, path]
        elif f.startswith("-DTORCH") or f.startswith("-DPYBIND11"):
            continue
        else:
            kept.append(f)
    return kept


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _argument_failure(spec: ExtensionSpec) -> BuildResult:
    """A build torch itself would fail on its arguments: failed with torch's reason, at the call, compiling
    nothing."""
    diagnostics = [Diagnostic(spec.call_line, None, "error", message, spec.call_file)
                   for message in spec.argument_errors]
    log = "[not built: torch's build fails on these arguments]\n" + "\n".join(spec.argument_errors)
    return BuildResult(False, spec.name, None, log, 0.0, strategy="arguments", diagnostics=diagnostics)


def source_unit_names(spec: ExtensionSpec) -> list[str]:
    """A file name per source file of a `load(sources=[...])` spec, distinct and apart from the generated units'
    names, that keeps the file's name (compiler messages show it)."""
    return [f"src{i}_{Path(path).name}" for i, path in enumerate(spec.source_paths)]


def build_many(builder: ExtensionBuilder, specs: list[ExtensionSpec], max_workers: int | None = None,
               timeout_s: float | None = None) -> list[BuildResult]:
    """Build several extensions at once."""
    return _side_by_side(lambda spec: builder.build(spec, timeout_s), specs, max_workers)


def kernelbench_load_inline(spec: ExtensionSpec, build_dir: Path, arch: str, timeout_s: float) -> BuildResult:
    """torch's own load_inline (load, for `load(sources=[...])`) in a subprocess, as KernelBench compiles: the
    parity reference, and the builder of what the layouts here do not reproduce. The subprocess builds and does not
    import (the worker imports, where a CUDA extension can load), and with a CPU build of torch uses the toolkit
    nvcc comes from and links without the CUDA libraries that torch lacks, as the builds here do."""
    start = time.monotonic()
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    common = dict(name=spec.name, extra_cflags=shell_quoted(spec.extra_cflags),
                  extra_cuda_cflags=shell_quoted(spec.extra_cuda_cflags),
                  extra_ldflags=shell_quoted(spec.extra_ldflags), with_cuda=spec.with_cuda,
                  build_directory=str(build_dir), verbose=True)
    if spec.source_paths:
        # The files' texts (an editor's unsaved text included) under names of their own; their folders go on the
        # include path, as in the builds here.
        sources = build_dir / "sources"
        sources.mkdir(exist_ok=True)
        files = []
        for name, file in zip(source_unit_names(spec), spec.source_files()):
            (sources / name).write_text(file.text)
            files.append(GeneratedFile(sources / name, _line_origins([_Chunk(file.text, file)])))
        folders = sorted({str(Path(p).parent) for p in spec.source_paths})
        call = dict(common, function="load", sources=[str(f.path) for f in files],
                    extra_include_paths=folders + spec.extra_include_paths)
    else:
        cpp, cuda = load_inline_sources(spec)
        files = [GeneratedFile(build_dir / "main.cpp", _line_origins(cpp)),
                 GeneratedFile(build_dir / "cuda.cu", _line_origins(cuda))]
        call = dict(common, function="load_inline", cpp_sources=spec.cpp_sources,
                    cuda_sources=spec.cuda_sources or None, functions=spec.functions,
                    extra_include_paths=spec.extra_include_paths, no_implicit_headers=spec.no_implicit_headers,
                    with_pytorch_error_handling=spec.with_pytorch_error_handling)
    script = ("import json, os, sys\n"
              "from torch.utils import cpp_extension as ce\n"
              "from dice_copilot.validator.compile import _drop_missing_libraries\n"
              "ce.CUDA_HOME = ce.CUDA_HOME or os.environ['CUDA_HOME']  # a CPU build of torch looks for none\n"
              "prepare = ce._prepare_ldflags\n"
              "ce._prepare_ldflags = lambda *a, **k: _drop_missing_libraries(prepare(*a, **k))\n"
              "ce._import_module_from_library = lambda name, path, is_module: os.path.join(path, name + '.so')\n"
              "kw = json.loads(sys.stdin.read())\n"
              "print('DICE_OK', getattr(ce, kw.pop('function'))(**kw))\n")
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=arch.removeprefix("sm_")[:-1] + "." + arch[-1],
               CUDA_HOME=os.environ.get("CUDA_HOME", cuda_home()))
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(json.dumps(call), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return BuildResult(False, spec.name, None, "timeout", time.monotonic() - start, timed_out=True,
                           strategy="kernelbench")
    match = re.search(r"DICE_OK (\S+)", out)
    ok = proc.returncode == 0 and match is not None
    return BuildResult(ok, spec.name, match.group(1) if match else None, out, time.monotonic() - start,
                       strategy="kernelbench", diagnostics=[] if ok else map_diagnostics(out, files))


