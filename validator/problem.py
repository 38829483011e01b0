"""Problems (PyTorch reference modules) and candidates (ModelNew modules or .cu files), and the CUDA extensions a
candidate builds, found statically so they can be compiled before any candidate code runs."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from .verdict import ValidatorError

# How far up from a .cu file we look for the Python module that builds it.
BUILDER_SEARCH_DEPTH = 3
BUILDER_SEARCH_MAX_FILES = 400


class InputError(ValidatorError, ValueError):
    """Bad user input (unreadable file, not a Python module, no Model class...): the message says what to do."""


@dataclass
class SourceSegment:
    """A piece of extension source text and the candidate-file line its first character came from (None: unknown)."""

    text: str
    file_line: int | None
    file: str | None = None


# torch.utils.cpp_extension's parameters in torch's own order (a test checks them against the installed torch), so
# positional arguments mean here what they mean to torch.
LOAD_INLINE_PARAMETERS = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
                          "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
                          "build_directory", "verbose", "with_cuda", "with_sycl", "is_python_module",
                          "with_pytorch_error_handling", "keep_intermediates", "use_pch", "no_implicit_headers")
LOAD_PARAMETERS = ("name", "sources", "extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags",
                   "extra_include_paths", "build_directory", "verbose", "with_cuda", "with_sycl", "is_python_module",
                   "is_standalone", "keep_intermediates")
PARAMETERS = {"load_inline": LOAD_INLINE_PARAMETERS, "load": LOAD_PARAMETERS}
# Arguments that steer torch's own build only (where it builds, what it prints, what it keeps): the binary is the
# same whatever they are, so they are neither kept nor resolved statically.
BUILD_ONLY_PARAMETERS = ("build_directory", "verbose", "keep_intermediates", "use_pch")
# Files torch compiles with nvcc (its _is_cuda_file), and the source files a candidate may read for its extension
# (the static checks let it open nothing else).
CUDA_SUFFIXES = (".cu", ".cuh")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".inl", ".ptx")
MAX_SOURCE_BYTES = 4 << 20


@dataclass
class ExtensionSpec:
    """One `load_inline(...)` / `load(...)` call with its arguments read as torch reads them (`from_call_kwargs`), so
    a static guess and the runtime call hash identically (BUILD_ONLY_PARAMETERS are not kept)."""

    name: str
    cpp_sources: list[str] = field(default_factory=list)
    cuda_sources: list[str] = field(default_factory=list)
    functions: list[str] | dict[str, str] | None = None
    # Compiler and linker arguments, one argv word each (never empty): see _flag_words.
    extra_cflags: list[str] = field(default_factory=list)
    extra_cuda_cflags: list[str] = field(default_factory=list)
    extra_ldflags: list[str] = field(default_factory=list)
    extra_include_paths: list[str] = field(default_factory=list)  # absolute, as torch passes them
    with_cuda: bool | None = None
    no_implicit_headers: bool = False
    with_pytorch_error_handling: bool = True  # the generated bindings go through torch::wrap_pybind_function
    is_python_module: bool = True  # False: torch loads the library into torch.ops and returns its path
    # For `load(sources=[...])`: file paths, in call order; their text lives in cpp/cuda_sources.
    source_paths: list[str] = field(default_factory=list)
    # Arguments torch's own build fails on (a flag list given as one string, a name that is no C identifier...):
    # the build fails with these messages instead of an obscure compiler error.
    argument_errors: list[str] = field(default_factory=list)
    # Why the builders here cannot reproduce this build (torch's own load_inline/load then builds it), or None.
    torch_build_reason: str | None = None
    # Where the call is (static specs only): argument errors are reported there.
    call_file: str | None = None
    call_line: int | None = None
    # Where each cuda/cpp source string starts in the candidate file (for mapping compiler errors back).
    cuda_segments: list[SourceSegment] = field(default_factory=list)
    cpp_segments: list[SourceSegment] = field(default_factory=list)

    def content_key(self) -> str:
        """Hash of everything that changes the built binary except the extension name (callers add flags/arch)."""
        h = hashlib.sha256()
        for part in (
            "cpp", *self.cpp_sources, "cuda", *self.cuda_sources, "fn", repr(self.functions),
            "cf", *self.extra_cflags, "ccf", *self.extra_cuda_cflags, "lf", *self.extra_ldflags,
            "inc", *self.extra_include_paths, "wc", repr(self.uses_cuda), "nih", repr(self.no_implicit_headers),
            "peh", repr(self.with_pytorch_error_handling), "err", *self.argument_errors,
            "torch", repr(self.torch_build_reason), "paths", *[Path(p).suffix for p in self.source_paths],
        ):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()

    @property
    def uses_cuda(self) -> bool:
        return bool(self.cuda_sources) if self.with_cuda is None else self.with_cuda

    def source_files(self) -> list[SourceSegment]:
        """For `load(sources=[...])`: each file's text and path, in call order."""
        cuda, cpp = iter(self.cuda_segments), iter(self.cpp_segments)
        return [next(cuda if p.endswith(CUDA_SUFFIXES) else cpp) for p in self.source_paths]

    @classmethod
    def from_call_kwargs(cls, kind: str, kwargs: dict, read_file=None) -> "ExtensionSpec":
        """A spec from the arguments of a `load_inline`/`load` call by name, each read as torch 2.x reads it:
        a string source or function name stands for a one-item list, flags become argv words, include paths
        absolute paths; what torch's build would fail on goes to `argument_errors`."""
        errors: list[str] = []
        unknown = sorted(set(kwargs) - set(PARAMETERS[kind]))
        if unknown:
            errors.append(f"{kind}() got an unexpected keyword argument '{unknown[0]}'")
        name = kwargs.get("name")
        is_python_module = bool(kwargs.get("is_python_module", True))
        if not isinstance(name, str):
            errors.append(f"name must be a string, not {name!r}")
            name = str(name)
        elif is_python_module and not name.isidentifier():
            errors.append(f"name={name!r} is not a C identifier: torch compiles the extension with "
                          f"TORCH_EXTENSION_NAME={name} and imports it as PyInit_{name}, which fails; use letters, "
                          f"digits and underscores, e.g. name={_safe_ext_name(name)!r}")
        if kwargs.get("sycl_sources") or kwargs.get("with_sycl"):
            errors.append("SYCL sources need Intel's SYCL toolchain; the validator checks CUDA extensions")
        if kwargs.get("is_standalone"):
            errors.append("is_standalone=True builds an executable, which ModelNew cannot call; build an "
                          "extension (the default)")
        no_implicit_headers = bool(kwargs.get("no_implicit_headers", False))
        functions = _functions(kwargs.get("functions"), errors)
        common = dict(
            name=name,
            extra_cflags=_flag_words(kwargs.get("extra_cflags"), "extra_cflags", errors),
            extra_cuda_cflags=_flag_words(kwargs.get("extra_cuda_cflags"), "extra_cuda_cflags", errors),
            extra_ldflags=_flag_words(kwargs.get("extra_ldflags"), "extra_ldflags", errors),
            extra_include_paths=_include_paths(kwargs.get("extra_include_paths"), errors),
            with_cuda=None if kwargs.get("with_cuda") is None else bool(kwargs["with_cuda"]),
            is_python_module=is_python_module,
            argument_errors=errors,
        )
        if kind == "load_inline":
            if kwargs.get("cpp_sources") is None:
                errors.append("cpp_sources is missing or None, which torch's load_inline fails on; pass the C++ "
                              "declarations of the bound functions (or \"\")")
            # torch adds its headers with list.insert (and its bindings with +=): a tuple fails there.
            cpp = _source_list(kwargs.get("cpp_sources"), "cpp_sources", errors,
                               mutated=not no_implicit_headers or functions is not None)
            cuda = _source_list(kwargs.get("cuda_sources"), "cuda_sources", errors, mutated=not no_implicit_headers)
            spec = cls(cpp_sources=cpp, cuda_sources=cuda, functions=functions,
                       no_implicit_headers=no_implicit_headers,
                       with_pytorch_error_handling=bool(kwargs.get("with_pytorch_error_handling", True)), **common)
        else:
            sources = kwargs.get("sources")
            paths = [os.fspath(p) for p in ([sources] if isinstance(sources, (str, os.PathLike)) else sources or [])]
            read = read_file or (lambda p: Path(p).read_text())
            files = [SourceSegment(read(p), 1, p) for p in paths]
            spec = cls(cpp_sources=[f.text for f in files if not f.file.endswith(CUDA_SUFFIXES)],
                       cuda_sources=[f.text for f in files if f.file.endswith(CUDA_SUFFIXES)], source_paths=paths,
                       cpp_segments=[f for f in files if not f.file.endswith(CUDA_SUFFIXES)],
                       cuda_segments=[f for f in files if f.file.endswith(CUDA_SUFFIXES)], **common)
            headers = [Path(p).name for p in paths if p.endswith((".cuh", ".h", ".hpp"))]
            if headers:
                spec.torch_build_reason = f"a header in sources ({headers[0]}), which torch compiles on its own"
        if spec.with_cuda is False and spec.cuda_sources:
            spec.torch_build_reason = "with_cuda=False with CUDA sources (torch compiles them with the C++ compiler)"
        return spec


def bind_call(kind: str, args: tuple, kwargs: dict) -> dict:
    """A `load_inline`/`load` call's positional and keyword arguments by parameter name, as torch binds them
    (TypeError where torch raises it)."""
    names = PARAMETERS[kind]
    if len(args) > len(names):
        raise TypeError(f"{kind}() takes {len(names)} arguments but {len(args)} were given")
    bound = dict(zip(names, args))
    for key in kwargs:
        if key in bound:
            raise TypeError(f"{kind}() got multiple values for argument '{key}'")
    return {**bound, **kwargs}


def _flag_words(value, argument: str, errors: list[str]) -> list[str]:
    """A compiler/linker flag argument as the argv words torch's build passes: torch strips each item and writes
    them, space-separated, into the ninja command line that the shell splits, so `""` is no word, `"-O3 -g"` two
    and quotes group. A plain string is iterated by torch one character at a time (one-letter arguments that every
    compiler rejects): an argument error that names the fix."""
    if value is None:
        return []
    if isinstance(value, str):
        if value.strip():
            letters = ", ".join(repr(c) for c in value.strip()[:3])
            errors.append(f"{argument}={value!r} is a string: torch's build reads it one character at a time "
                          f"({letters}, ...), which the compiler rejects; pass a list, e.g. "
                          f"{argument}={_split_or_whole(value)!r}")
        return []
    try:
        items = list(value)
    except TypeError:
        errors.append(f"{argument} must be a list of strings, not {value!r}")
        return []
    if not all(isinstance(item, str) for item in items):
        errors.append(f"{argument} must be a list of strings, not {value!r}")
        return []
    try:
        return shlex.split(" ".join(item.strip() for item in items))
    except ValueError:
        errors.append(f"{argument}={value!r} has an unmatched quote, which the shell that runs torch's compiler "
                      f"rejects")
        return []


def _split_or_whole(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return [text.strip()]


def _include_paths(value, errors: list[str]) -> list[str]:
    """extra_include_paths as torch passes them: each item stripped and made absolute against the working
    directory (a plain string, as in torch, one character at a time)."""
    if value is None:
        return []
    try:
        items = list(value)
    except TypeError:
        items = [value]
    if not all(isinstance(item, (str, os.PathLike)) for item in items):
        errors.append(f"extra_include_paths must be a list of strings, not {value!r}")
        return []
    return [os.path.abspath(os.fspath(item).strip()) for item in items]


def _functions(value, errors: list[str]):
    """`functions` as load_inline reads it: one name, a list of names (each its own docstring) or a dict of
    docstrings."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    errors.append(f"functions must be a list of names or a dict of docstrings, not a {type(value).__name__} "
                  f"(torch raises ValueError)")
    return None


def _source_list(value, argument: str, errors: list[str], mutated: bool) -> list[str]:
    """cpp_sources/cuda_sources: a string is one source, None or empty none; `mutated`: torch adds to the list."""
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple) and mutated:
        errors.append(f"{argument} is a tuple: torch's load_inline adds its headers to the list and fails on a "
                      f"tuple; pass a list or a string")
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        errors.append(f"{argument} must hold strings of source code")
        return [str(item) for item in items]
    return items


@dataclass
class Problem:
    """A PyTorch reference: `class_name` (default `Model`) built from `get_init_inputs()`, fed `get_inputs()`."""

    source: str
    path: str | None = None
    class_name: str = "Model"

    @classmethod
    def from_source(cls, py_source: str, path=None, class_name: str = "Model") -> "Problem":
        tree = _parse_python(py_source, path, "reference problem")
        names = _top_level_names(tree)
        if class_name not in names:
            raise InputError(
                f"{path or 'the reference'}: no class named '{class_name}' at the top level; the reference must "
                f"define the PyTorch module to compare against (e.g. `class {class_name}(nn.Module)`)."
            )
        if "get_inputs" not in names:
            raise InputError(
                f"{path or 'the reference'}: no `get_inputs()` function; add one returning the forward() "
                f"arguments, e.g. `def get_inputs(): return [torch.randn(1024, 1024)]`."
            )
        needed = _required_init_arguments(tree, class_name)
        if needed and "get_init_inputs" not in names:
            raise InputError(
                f"{path or 'the reference'}: `{class_name}.__init__` takes {', '.join(needed)} but there is no "
                f"`get_init_inputs()` to supply them; add one returning the constructor arguments, e.g. "
                f"`def get_init_inputs(): return [{', '.join('...' for _ in needed)}]`."
            )
        return cls(source=py_source, path=str(path) if path else None, class_name=class_name)

    @classmethod
    def from_file(cls, path, class_name: str = "Model") -> "Problem":
        return cls.from_source(_read_text(path, "reference problem"), path=str(path), class_name=class_name)


@dataclass
class Candidate:
    """Candidate code: a Python module defining `class ModelNew` that builds its CUDA extensions with
    `load_inline`/`load`, or a .cu file together with the Python module that builds it."""

    source: str
    path: str | None = None
    class_name: str = "ModelNew"
    # For .cu candidates: the .cu path and its (possibly unsaved) text, which replaces the file on disk.
    cu_path: str | None = None
    cu_text: str | None = None
    builder_path: str | None = None
    static_specs: list[ExtensionSpec] = field(default_factory=list)
    # The load_inline/load calls whose arguments could not be resolved without running the module (each with its
    # line and the expression): those extensions are built when the candidate runs.
    unresolved_calls: list[str] = field(default_factory=list)
    # Why the candidate can only be compiled, not run (a .cu file that no ModelNew module builds); None: runnable.
    not_run_reason: str | None = None

    @property
    def runnable(self) -> bool:
        return self.not_run_reason is None

    @property
    def specs_complete(self) -> bool:
        """Every extension the candidate builds was found (and is compiled before any candidate code runs)."""
        return not self.unresolved_calls

    @property
    def display_path(self) -> str | None:
        return self.cu_path or self.path

    @classmethod
    def from_source(cls, py_source: str, path=None) -> "Candidate":
        if path is not None and str(path).endswith(CUDA_SUFFIXES):
            return cls.from_cuda_file(path, text=py_source)
        tree = _parse_python(py_source, path, "candidate")
        specs, unresolved = extract_extension_specs(tree, path)
        return cls(source=py_source, path=str(path) if path else None, static_specs=specs,
                   unresolved_calls=unresolved)

    @classmethod
    def from_file(cls, path) -> "Candidate":
        path = Path(path)
        text = _read_text(path, "candidate")
        if path.suffix in CUDA_SUFFIXES:
            return cls.from_cuda_file(path, text=text)
        return cls.from_source(text, path=str(path))

    @classmethod
    def from_cuda_file(cls, cu_path, text: str | None = None) -> "Candidate":
        """The .cu file with the specs of the module that builds it (compiled with that call's arguments; run when
        that module defines ModelNew, else compiled only), or on its own, compiled only, when no module builds
        it."""
        cu_path = Path(cu_path).resolve()
        if text is None:
            text = _read_text(cu_path, "candidate")
        builder = find_builder_module(cu_path)
        if builder is not None:
            builder_source = builder.read_text()
            tree = _parse_python(builder_source, builder, "module that builds the .cu file")
            specs, unresolved = extract_extension_specs(tree, builder, cu_overrides={str(cu_path): text})
            if any(_compiles_file(spec, cu_path) for spec in specs) or unresolved:
                if "ModelNew" in _top_level_names(tree):
                    return cls(source=builder_source, path=str(builder), cu_path=str(cu_path), cu_text=text,
                               builder_path=str(builder), static_specs=specs, unresolved_calls=unresolved)
                return cls(source="", cu_path=str(cu_path), cu_text=text, builder_path=str(builder),
                           static_specs=specs, unresolved_calls=unresolved,
                           not_run_reason=f"not run: {builder.name}, the module that builds this .cu file, defines "
                                          f"no class ModelNew")
        # Built by no module (or by none of the calls of the module that names it): compiled on its own.
        bare = ExtensionSpec(name=_safe_ext_name(cu_path.stem), cuda_sources=[text], source_paths=[str(cu_path)],
                             cuda_segments=[SourceSegment(text, 1, str(cu_path))])
        return cls(source="", cu_path=str(cu_path), cu_text=text, static_specs=[bare],
                   not_run_reason="not run: no Python module builds this .cu file (add one that calls "
                                  "torch.utils.cpp_extension.load(sources=[...]) to run it)")


def _compiles_file(spec: ExtensionSpec, path: Path) -> bool:
    return any(segment.file == str(path) for segment in spec.cuda_segments + spec.cpp_segments)


def _safe_ext_name(stem: str) -> str:
    name = re.sub(r"\W", "_", stem) or "ext"
    return name if name.isidentifier() else "_" + name


def _read_text(path, what: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {what} file {path}: {exc}") from exc


def _parse_python(source: str, path, what: str) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path or "<string>"))
    except SyntaxError as exc:
        raise InputError(f"the {what} {path or ''} is not valid Python: {exc.msg} at line {exc.lineno}") from exc


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


# ---------------------------------------------------------------- static extraction of load_inline / load calls

EXTENSION_MODULE = "torch.utils.cpp_extension"


def _required_init_arguments(tree: ast.Module, class_name: str) -> list[str]:
    """The constructor parameters of the top-level class that have no default: a module built with no arguments
    needs no `get_init_inputs()`, one whose constructor needs them does."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    positional = args.posonlyargs + args.args
                    without_default = positional[1:len(positional) - len(args.defaults)]  # the first is self
                    keyword_only = [a for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
                    return [a.arg for a in without_default + keyword_only]
    return []


class _Unresolved(Exception):
    """An argument depends on runtime values; the extension is then built when the candidate calls load_inline.
    The message says what the call does that cannot be followed here."""

    @classmethod
    def expression(cls, node_text: str) -> "_Unresolved":
        return cls(f"uses `{node_text}`, known only when the module runs")


def extract_extension_specs(tree: ast.Module, path=None, cu_overrides: dict[str, str] | None = None
                            ) -> tuple[list[ExtensionSpec], list[str]]:
    """Every `load_inline(...)` / `load(...)` call of torch's cpp_extension, wherever it is (at import, in
    `__init__`, in a helper), with its arguments resolved from literals, the names they are bound to in the
    call's own scope and the module's, string operations on them and paths built from `__file__`.

    Returns the specs (one per distinct build) and, for each call that could not be resolved, a line saying
    where and on what it depends (such extensions are built when the candidate runs)."""
    resolver = _Resolver(tree, path, cu_overrides or {})
    specs: dict[str, ExtensionSpec] = {}
    unresolved: list[str] = []
    for call, scopes in resolver.extension_calls():
        kind = resolver.call_kind(call)
        try:
            spec = resolver.spec_for_call(kind, call, scopes)
        except _Unresolved as why:
            unresolved.append(f"line {call.lineno}: {kind}(...) {why}")
            continue
        specs.setdefault(spec.content_key(), spec)
    return list(specs.values()), unresolved


@dataclass(frozen=True)
class _Scope:
    """Where an expression is evaluated: the scopes around it, innermost first (function or class bodies, then
    the module), and its line (a binding counts when it comes before that line in a scope run from top to
    bottom; a function runs after the module has finished, so it sees the module's last binding)."""

    chain: tuple[ast.AST, ...]
    line: int


@dataclass(frozen=True)
class _OpenFile:
    """The value of `open(path)`: `.read()` gives the file's text."""

    path: str


class _Resolver:
    """Evaluates call arguments made of literals, bound names, string and path operations, without running
    anything."""

    # Calls whose result follows from their (evaluated) arguments alone: qualified name -> the function.
    PURE_FUNCTIONS = {
        "os.path.join": os.path.join, "os.path.dirname": os.path.dirname, "os.path.abspath": os.path.abspath,
        "os.path.realpath": os.path.realpath, "os.path.normpath": os.path.normpath, "os.path.basename":
        os.path.basename, "os.fspath": os.fspath, "str": str, "pathlib.Path": PurePath, "pathlib.PurePath": PurePath,
        "pathlib.PosixPath": PurePath, "textwrap.dedent": textwrap.dedent,
    }
    STRING_METHODS = ("strip", "lstrip", "rstrip", "format", "replace", "join")
    PATH_METHODS = ("resolve", "absolute", "with_name", "with_suffix", "joinpath")

    def __init__(self, tree: ast.Module, path, cu_overrides: dict[str, str]):
        self.tree = tree
        self.path = str(path) if path else None
        self.file = str(Path(path).resolve()) if path else None
        self.folder = Path(self.file).parent if self.file else Path.cwd()
        self.cu_overrides = cu_overrides
        self.aliases = _import_aliases(tree)
        self.bindings: dict[int, dict[str, list[tuple[int, ast.AST]]]] = {}

    # ---- finding the calls

    def extension_calls(self):
        """(call, scopes) for each call of torch's load_inline/load, with the scopes around it."""
        def visit(node, chain):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Call) and self.call_kind(child):
                    yield child, chain
                inner = chain
                if isinstance(child, ast.ClassDef):
                    inner = (child, *chain)
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    # a function does not see the names of the class bodies around it
                    inner = (child, *[c for c in chain if not isinstance(c, ast.ClassDef)])
                yield from visit(child, inner)
        yield from visit(self.tree, (self.tree,))

    def call_kind(self, call: ast.Call) -> str | None:
        """"load_inline" / "load" for a call of torch's functions (imported under any name, through the module
        or a star import), else None (json.load, torch.load...)."""
        qualified = self.qualify(call.func) or ""
        last = qualified.rsplit(".", 1)[-1]
        if last not in PARAMETERS:
            return None
        if qualified == f"{EXTENSION_MODULE}.{last}" or f".{qualified}".endswith(f".cpp_extension.{last}"):
            return last  # torch's, also through a module of that name the static scan cannot follow
        star = self.aliases.get("*") == EXTENSION_MODULE
        return last if qualified == last and (last == "load_inline" or star) else None

    def qualify(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    # ---- one call

    def spec_for_call(self, kind: str, call: ast.Call, chain: tuple) -> ExtensionSpec:
        scope = _Scope(chain, call.lineno)
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise _Unresolved("passes *args or **kwargs, known only when the module runs")
        names = PARAMETERS[kind]
        nodes = dict(zip(names, call.args))
        nodes.update({k.arg: k.value for k in call.keywords})
        kwargs = {k: self.value(v, scope) for k, v in nodes.items() if k not in BUILD_ONLY_PARAMETERS}
        if kind == "load":
            paths = kwargs.get("sources") or []
            paths = [paths] if isinstance(paths, (str, PurePath)) else paths
            kwargs["sources"] = [self.file_path(p) for p in paths]
            spec = ExtensionSpec.from_call_kwargs("load", kwargs, read_file=self.read_source_file)
        else:
            spec = ExtensionSpec.from_call_kwargs("load_inline", kwargs)
            # The same texts again, as pieces that know their lines.
            spec.cpp_segments = self.segments_list(nodes.get("cpp_sources"), scope)
            spec.cuda_segments = self.segments_list(nodes.get("cuda_sources"), scope)
        spec.call_file, spec.call_line = self.path, call.lineno
        return spec

    def file_path(self, path) -> str:
        """A path the candidate names, absolute and resolved (as the .cu candidate's own path is); a relative one
        is taken from the candidate's folder."""
        return str((self.folder / os.fspath(path)).resolve())

    def read_source_file(self, path: str) -> str:
        """A CUDA/C++ source file's text (an editor's unsaved text first); only source files, and not huge ones."""
        if path in self.cu_overrides:
            return self.cu_overrides[path]
        file = Path(path)
        if not path.lower().endswith(SOURCE_SUFFIXES):
            raise _Unresolved(f"reads {file.name}, which is not a CUDA/C++ source file")
        try:
            if file.stat().st_size > MAX_SOURCE_BYTES:
                raise _Unresolved(f"reads {file.name}, over {MAX_SOURCE_BYTES >> 20} MB")
            return file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise _Unresolved(f"reads {path}, which cannot be read here ({type(exc).__name__})") from exc

    # ---- values

    def value(self, node: ast.AST, scope: _Scope):
        """The Python value of an expression built from literals, bound names and string/path operations."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List):
            return [self.value(e, scope) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.value(e, scope) for e in node.elts)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.value(k, scope): self.value(v, scope) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Name):
            if node.id == "__file__" and self.file and self.binding(node.id, scope) is None:
                return self.file
            bound = self.binding(node.id, scope)
            if bound is None:
                raise _Unresolved.expression(node.id)
            return self.value(*bound)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div, ast.Mod)):
            left, right = self.value(node.left, scope), self.value(node.right, scope)
            try:
                if isinstance(node.op, ast.Div):
                    if not isinstance(left, PurePath):
                        raise TypeError
                    return left / right
                return left + right if isinstance(node.op, ast.Add) else left % right
            except TypeError as exc:
                raise _Unresolved.expression(ast.unparse(node)) from exc
        if isinstance(node, ast.JoinedStr):
            return "".join(self.formatted(v, scope) for v in node.values)
        if isinstance(node, ast.Attribute) and node.attr in ("parent", "name", "stem", "suffix"):
            base = self.value(node.value, scope)
            if isinstance(base, PurePath):
                return getattr(base, node.attr)
        if isinstance(node, ast.Call):
            return self.call_value(node, scope)
        raise _Unresolved.expression(ast.unparse(node))

    def formatted(self, node: ast.AST, scope: _Scope) -> str:
        if isinstance(node, ast.Constant):
            return str(node.value)
        if not isinstance(node, ast.FormattedValue):
            raise _Unresolved.expression(ast.unparse(node))
        value = self.value(node.value, scope)
        value = {115: str, 114: repr, 97: ascii}.get(node.conversion, lambda v: v)(value)
        spec = self.value(node.format_spec, scope) if node.format_spec is not None else ""
        return format(value, spec)

    def call_value(self, node: ast.Call, scope: _Scope):
        if node.keywords and not all(k.arg for k in node.keywords):
            raise _Unresolved.expression(ast.unparse(node))
        qualified = self.qualify(node.func)
        function = self.PURE_FUNCTIONS.get(qualified or "")
        if function is not None and self.binding(qualified.split(".")[0], scope) is None:
            args = [self.value(a, scope) for a in node.args]
            try:
                return function(*args)
            except (TypeError, ValueError) as exc:
                raise _Unresolved.expression(ast.unparse(node)) from exc
        if qualified == "open" and node.args and self.binding("open", scope) is None:
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                  None)
            if mode is not None and self.value(mode, scope) not in ("r", "rt"):
                raise _Unresolved.expression(ast.unparse(node))
            return _OpenFile(self.file_path(self.value(node.args[0], scope)))
        if isinstance(node.func, ast.Attribute):
            receiver = self.value(node.func.value, scope)
            method = node.func.attr
            args = [self.value(a, scope) for a in node.args]
            kwargs = {k.arg: self.value(k.value, scope) for k in node.keywords}
            if method == "read" and isinstance(receiver, _OpenFile) and not args:
                return self.read_source_file(receiver.path)
            if method == "read_text" and isinstance(receiver, PurePath):
                return self.read_source_file(self.file_path(receiver))
            if (isinstance(receiver, str) and method in self.STRING_METHODS) or (
                    isinstance(receiver, PurePath) and method in self.PATH_METHODS):
                if method in ("resolve", "absolute"):
                    return PurePath(os.path.abspath(self.folder / receiver))
                try:
                    return getattr(receiver, method)(*args, **kwargs)
                except (TypeError, ValueError, KeyError, IndexError) as exc:
                    raise _Unresolved.expression(ast.unparse(node)) from exc
        raise _Unresolved.expression(ast.unparse(node))

    # ---- source strings with their lines

    def segments_list(self, node: ast.AST | None, scope: _Scope) -> list[SourceSegment]:
        """A source argument (a string or a list of strings) as located segments, string after string."""
        if node is None:
            return []
        if isinstance(node, ast.Name) and self.binding(node.id, scope) is not None:
            return self.segments_list(*self.binding(node.id, scope))
        if isinstance(node, (ast.List, ast.Tuple)):
            return [s for e in node.elts for s in self.segments(e, scope)]
        value = self.value(node, scope)
        if isinstance(value, (list, tuple)):  # a list built some other way: texts without lines
            return [SourceSegment(str(text), None, self.path) for text in value]
        return self.segments(node, scope) if value else []

    def segments(self, node: ast.AST, scope: _Scope) -> list[SourceSegment]:
        """A source string as pieces that know the candidate-file line (or source file) they start on."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [SourceSegment(node.value, node.lineno, self.path)]
        if isinstance(node, ast.Name) and self.binding(node.id, scope) is not None:
            return self.segments(*self.binding(node.id, scope))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.segments(node.left, scope) + self.segments(node.right, scope)
        text = self.value(node, scope)
        if not isinstance(text, str):
            raise _Unresolved.expression(ast.unparse(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "read", "read_text"):
            receiver = self.value(node.func.value, scope)
            file = receiver.path if isinstance(receiver, _OpenFile) else self.file_path(receiver)
            return [SourceSegment(text, 1, file)]
        operation = self.text_operation(node, scope)
        if operation is not None:
            located = _located_result(self.segments(operation[0], scope), operation[1], text)
            if located is not None:
                return located
        return [SourceSegment(text, node.lineno if isinstance(node, ast.JoinedStr) else None, self.path)]

    def text_operation(self, node: ast.AST, scope: _Scope):
        """(operand, function of one piece of it) for `textwrap.dedent(s)` and `s.strip()`, `.replace(...)`,
        `.format(...)`, whose results keep the operand's lines; None for anything else."""
        if not isinstance(node, ast.Call):
            return None
        if self.qualify(node.func) == "textwrap.dedent" and len(node.args) == 1 and not node.keywords:
            return node.args[0], textwrap.dedent
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("strip", "lstrip", "rstrip", "replace",
                                                                       "format"):
            args = [self.value(a, scope) for a in node.args]
            kwargs = {k.arg: self.value(k.value, scope) for k in node.keywords}
            return node.func.value, lambda piece: getattr(piece, node.func.attr)(*args, **kwargs)
        return None

    # ---- names

    def binding(self, name: str, scope: _Scope) -> tuple[ast.AST, _Scope] | None:
        """The expression a name is bound to where `scope` evaluates it, and the scope that expression is
        evaluated in; None when the name has no simple binding there."""
        limit = scope.line
        for depth, owner in enumerate(scope.chain):
            found = [(line, value) for line, value in self._bindings(owner).get(name, []) if line < limit]
            if found:
                line, value = found[-1]
                return value, _Scope(scope.chain[depth:], line)
            if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                limit = 1 << 30  # a function body runs once the enclosing scope has finished
        return None

    def _bindings(self, owner: ast.AST) -> dict[str, list[tuple[int, ast.AST]]]:
        """name -> (line, value) for the simple bindings of one scope, in line order: `x = ...`, `x: T = ...`,
        `x += ...`, `a, b = ..., ...` and `with open(...) as f`, in compound statements too but not in nested
        functions or classes."""
        cached = self.bindings.get(id(owner))
        if cached is not None:
            return cached
        found: dict[str, list[tuple[int, ast.AST]]] = {}

        def bind(target, value, line):
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append((line, value))
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                    and len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts):
                    bind(t, v, line)

        def walk(statements):
            for node in statements:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found.setdefault(node.name, []).append((node.lineno, node))
                    continue
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        bind(target, node.value, node.end_lineno)
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    bind(node.target, node.value, node.end_lineno)
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    combined = ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
                    ast.copy_location(combined, node)
                    bind(node.target, combined, node.end_lineno)
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        if item.optional_vars is not None:
                            bind(item.optional_vars, item.context_expr, node.lineno)
                for field_name in ("body", "orelse", "finalbody", "handlers"):
                    walk(getattr(node, field_name, []) or [])

        body = owner.body if isinstance(getattr(owner, "body", None), list) else []
        if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in [*owner.args.posonlyargs, *owner.args.args, *owner.args.kwonlyargs]:
                found.setdefault(arg.arg, []).append((owner.lineno, arg))  # a parameter: known only at run time
        walk(body)
        for entries in found.values():
            entries.sort(key=lambda entry: entry[0])
        self.bindings[id(owner)] = found
        return found


def _located_result(pieces: list[SourceSegment], operation, text: str) -> list[SourceSegment] | None:
    """The pieces of `text`, the result of `operation` on the concatenated pieces, each still knowing its line:
    stripping moves the first line by the newlines it removes; any other operation is applied piece by piece,
    which must give the same text, and a piece keeps its line when it keeps its line count. None when the
    result cannot be located this way."""
    whole = "".join(p.text for p in pieces)
    if not pieces or text == whole:
        return pieces or None
    if text in (whole.strip(), whole.lstrip(), whole.rstrip()):
        head = len(whole) - len(whole.lstrip()) if text in (whole.strip(), whole.lstrip()) else 0
        return _slice_pieces(pieces, head, head + len(text))
    try:
        results = [operation(p.text) for p in pieces]
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    if "".join(results) != text:
        return None
    return [SourceSegment(r, p.file_line if r.count("\n") == p.text.count("\n") else None, p.file)
            for p, r in zip(pieces, results)]


def _slice_pieces(pieces: list[SourceSegment], start: int, end: int) -> list[SourceSegment]:
    """Characters [start, end) of the pieces' concatenation, as pieces whose lines move past what is cut."""
    out, offset = [], 0
    for piece in pieces:
        low, high = max(start - offset, 0), min(end - offset, len(piece.text))
        if low < high:
            line = None if piece.file_line is None else piece.file_line + piece.text[:low].count("\n")
            out.append(SourceSegment(piece.text[low:high], line, piece.file))
        offset += len(piece.text)
    return out


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name for every import in the module (`"*"` -> the module of a star import)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    aliases["*"] = node.module
                else:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


# ---------------------------------------------------------------- .cu -> the Python module that builds it

def find_builder_module(cu_path: Path) -> Path | None:
    """The Python file in the .cu file's folder or up to BUILDER_SEARCH_DEPTH parents that names the .cu file in a
    `load(sources=[...])` call or reads it for `load_inline`. Nearest folder wins."""
    cu_path = Path(cu_path).resolve()
    folder = cu_path.parent
    scanned = 0
    for _ in range(BUILDER_SEARCH_DEPTH + 1):
        for py in sorted(folder.glob("*.py")) + sorted(folder.glob("*/*.py")):
            scanned += 1
            if scanned > BUILDER_SEARCH_MAX_FILES:
                return None
            try:
                text = py.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if cu_path.name not in text or ("load(" not in text and "load_inline(" not in text):
                continue
            if _mentions_file(text, py, cu_path):
                return py
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def _mentions_file(text: str, py: Path, cu_path: Path) -> bool:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(cu_path.name):
            candidate = (py.parent / node.value).resolve()
            if candidate == cu_path or Path(node.value).name == cu_path.name:
                return True
    return False
