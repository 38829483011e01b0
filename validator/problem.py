"""Problems (PyTorch reference modules) and candidates (ModelNew modules or .cu files), and the CUDA extensions a
candidate builds, found statically so they can be compiled before any candidate code runs."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

# How far up from a .cu file we look for the Python module that builds it.
BUILDER_SEARCH_DEPTH = 3
BUILDER_SEARCH_MAX_FILES = 400


class InputError(ValueError):
    """Bad user input (unreadable file, not a Python module, no Model class...): the message says what to do."""


@dataclass
class SourceSegment:
    """A piece of extension source text and the candidate-file line its first character came from (None: unknown)."""

    text: str
    file_line: int | None
    file: str | None = None


@dataclass
class ExtensionSpec:
    """The arguments of one `load_inline(...)` / `load(...)` call, normalised so a static guess and the runtime call
    hash identically."""

    name: str
    cpp_sources: list[str] = field(default_factory=list)
    cuda_sources: list[str] = field(default_factory=list)
    functions: list[str] | dict[str, str] | None = None
    extra_cflags: list[str] = field(default_factory=list)
    extra_cuda_cflags: list[str] = field(default_factory=list)
    extra_ldflags: list[str] = field(default_factory=list)
    extra_include_paths: list[str] = field(default_factory=list)
    with_cuda: bool | None = None
    no_implicit_headers: bool = False
    # For `load(sources=[...])`: file paths, in call order; their text lives in cpp/cuda_sources.
    source_paths: list[str] = field(default_factory=list)
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
            "paths", *[Path(p).suffix for p in self.source_paths],
        ):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()

    @property
    def uses_cuda(self) -> bool:
        return bool(self.cuda_sources) if self.with_cuda is None else self.with_cuda

    @classmethod
    def from_call_kwargs(cls, kind: str, kwargs: dict, read_file=None) -> "ExtensionSpec":
        """Build a spec from the actual keyword arguments of a runtime `load_inline`/`load` call."""
        as_list = _as_str_list
        if kind == "load_inline":
            return cls(
                name=str(kwargs["name"]),
                cpp_sources=as_list(kwargs.get("cpp_sources")),
                cuda_sources=as_list(kwargs.get("cuda_sources")),
                functions=_normalise_functions(kwargs.get("functions")),
                extra_cflags=as_list(kwargs.get("extra_cflags")),
                extra_cuda_cflags=as_list(kwargs.get("extra_cuda_cflags")),
                extra_ldflags=as_list(kwargs.get("extra_ldflags")),
                extra_include_paths=as_list(kwargs.get("extra_include_paths")),
                with_cuda=kwargs.get("with_cuda"),
                no_implicit_headers=bool(kwargs.get("no_implicit_headers", False)),
            )
        paths = as_list(kwargs.get("sources"))
        read = read_file or (lambda p: Path(p).read_text())
        cpp, cuda = [], []
        for p in paths:
            (cuda if p.endswith((".cu", ".cuh")) else cpp).append(read(p))
        return cls(
            name=str(kwargs["name"]),
            cpp_sources=cpp,
            cuda_sources=cuda,
            extra_cflags=as_list(kwargs.get("extra_cflags")),
            extra_cuda_cflags=as_list(kwargs.get("extra_cuda_cflags")),
            extra_ldflags=as_list(kwargs.get("extra_ldflags")),
            extra_include_paths=as_list(kwargs.get("extra_include_paths")),
            with_cuda=kwargs.get("with_cuda"),
            source_paths=paths,
        )


def _as_str_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _normalise_functions(value):
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return [str(v) for v in value]


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
        return cls(source=py_source, path=str(path) if path else None, class_name=class_name)

    @classmethod
    def from_file(cls, path, class_name: str = "Model") -> "Problem":
        return cls.from_source(_read_text(path, "reference problem"), path=str(path), class_name=class_name)


@dataclass
class Candidate:
    """Candidate code: a Python module defining `class_name` (default `ModelNew`) that builds its CUDA extension
    with `load_inline`/`load`, or a .cu file together with the Python module that builds it."""

    source: str
    path: str | None = None
    class_name: str = "ModelNew"
    # For .cu candidates: the .cu path and its (possibly unsaved) text, which replaces the file on disk.
    cu_path: str | None = None
    cu_text: str | None = None
    builder_path: str | None = None
    static_specs: list[ExtensionSpec] = field(default_factory=list)
    # False when some load_inline/load argument could not be resolved without running the module.
    specs_complete: bool = True

    @property
    def runnable(self) -> bool:
        """A .cu file without a Python module that builds it can only be compiled."""
        return self.cu_path is None or self.builder_path is not None

    @property
    def display_path(self) -> str | None:
        return self.cu_path or self.path

    @classmethod
    def from_source(cls, py_source: str, path=None) -> "Candidate":
        if path is not None and str(path).endswith((".cu", ".cuh")):
            return cls.from_cuda_file(path, text=py_source)
        tree = _parse_python(py_source, path, "candidate")
        specs, complete = extract_extension_specs(tree, py_source, path)
        names = _top_level_names(tree)
        class_name = "ModelNew" if "ModelNew" in names else _single_module_class(tree) or "ModelNew"
        return cls(source=py_source, path=str(path) if path else None, class_name=class_name,
                   static_specs=specs, specs_complete=complete)

    @classmethod
    def from_file(cls, path) -> "Candidate":
        path = Path(path)
        text = _read_text(path, "candidate")
        if path.suffix in (".cu", ".cuh"):
            return cls.from_cuda_file(path, text=text)
        return cls.from_source(text, path=str(path))

    @classmethod
    def from_cuda_file(cls, cu_path, text: str | None = None) -> "Candidate":
        cu_path = Path(cu_path).resolve()
        if text is None:
            text = _read_text(cu_path, "candidate")
        builder = find_builder_module(cu_path)
        if builder is None:
            spec = ExtensionSpec(name=_safe_ext_name(cu_path.stem), cuda_sources=[text], source_paths=[str(cu_path)],
                                 cuda_segments=[SourceSegment(text, 1, str(cu_path))])
            return cls(source="", path=None, cu_path=str(cu_path), cu_text=text, static_specs=[spec])
        builder_source = builder.read_text()
        tree = _parse_python(builder_source, builder, "module that builds the .cu file")
        specs, complete = extract_extension_specs(tree, builder_source, builder, cu_overrides={str(cu_path): text})
        names = _top_level_names(tree)
        class_name = "ModelNew" if "ModelNew" in names else _single_module_class(tree) or "ModelNew"
        return cls(source=builder_source, path=str(builder), class_name=class_name, cu_path=str(cu_path),
                   cu_text=text, builder_path=str(builder), static_specs=specs, specs_complete=complete)


def _safe_ext_name(stem: str) -> str:
    return re.sub(r"\W", "_", stem) or "ext"


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


def _single_module_class(tree: ast.Module) -> str | None:
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
               and any("Module" in ast.unparse(b) for b in n.bases)]
    return classes[0] if len(classes) == 1 else None


# ---------------------------------------------------------------- static extraction of load_inline / load calls

_LOAD_INLINE_POSITIONAL = ("name", "cpp_sources", "cuda_sources")
_LOAD_POSITIONAL = ("name", "sources")


class _Unresolved(Exception):
    """An argument depends on runtime values; the extension is then built when the candidate calls load_inline."""


def extract_extension_specs(tree: ast.Module, source: str, path=None, cu_overrides: dict[str, str] | None = None
                            ) -> tuple[list[ExtensionSpec], bool]:
    """Find every `load_inline(...)` / `load(...)` call and resolve its arguments from module-level string constants.

    Returns the specs and whether all calls were resolved (unresolved ones are built when the candidate runs)."""
    env = _ModuleStrings(tree, path, cu_overrides or {})
    specs: list[ExtensionSpec] = []
    complete = True
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if fname not in ("load_inline", "load"):
            continue
        positional = _LOAD_INLINE_POSITIONAL if fname == "load_inline" else _LOAD_POSITIONAL
        args = {positional[i]: a for i, a in enumerate(node.args[: len(positional)])}
        args.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
        if "name" not in args or (fname == "load" and "sources" not in args):
            continue  # some other function called load(); not an extension build
        try:
            specs.append(env.spec_for_call(fname, args))
        except _Unresolved:
            complete = False
    return specs, complete


class _ModuleStrings:
    """Resolves call arguments made of literals and module-level names bound to them."""

    def __init__(self, tree: ast.Module, path, cu_overrides: dict[str, str]):
        self.path = str(path) if path else None
        self.folder = Path(path).resolve().parent if path else Path.cwd()
        self.cu_overrides = cu_overrides
        self.bindings: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.bindings[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.bindings[node.target.id] = node.value

    def spec_for_call(self, fname: str, args: dict[str, ast.expr]) -> ExtensionSpec:
        name = self.text(args["name"])
        kwargs = {k: self.value(v) for k, v in args.items() if k not in ("cpp_sources", "cuda_sources", "sources")}
        kwargs["name"] = name
        if fname == "load_inline":
            cpp_segments = self.segments_list(args.get("cpp_sources"))
            cuda_segments = self.segments_list(args.get("cuda_sources"))
            kwargs["cpp_sources"] = ["".join(s.text for s in group) for group in cpp_segments]
            kwargs["cuda_sources"] = ["".join(s.text for s in group) for group in cuda_segments]
            spec = ExtensionSpec.from_call_kwargs("load_inline", kwargs)
            spec.cpp_segments = [s for group in cpp_segments for s in group]
            spec.cuda_segments = [s for group in cuda_segments for s in group]
            return spec
        paths = [str((self.folder / p).resolve()) for p in _as_str_list(self.value(args["sources"]))]
        kwargs["sources"] = paths
        spec = ExtensionSpec.from_call_kwargs("load", kwargs, read_file=self.read_source_file)
        for p, text in zip(paths, [self.read_source_file(p) for p in paths]):
            target = spec.cuda_segments if p.endswith((".cu", ".cuh")) else spec.cpp_segments
            target.append(SourceSegment(text, 1, p))
        return spec

    def read_source_file(self, path: str) -> str:
        if path in self.cu_overrides:
            return self.cu_overrides[path]
        try:
            return Path(path).read_text()
        except OSError as exc:
            raise _Unresolved(path) from exc

    def value(self, node: ast.expr):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self.value(self.bindings[node.id])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left) + self.value(node.right)
        raise _Unresolved(ast.unparse(node))

    def text(self, node: ast.expr) -> str:
        value = self.value(node)
        if not isinstance(value, str):
            raise _Unresolved(ast.unparse(node))
        return value

    def segments_list(self, node: ast.expr | None) -> list[list[SourceSegment]]:
        """A source argument (string or list of strings) as lists of located segments, one list per string."""
        if node is None:
            return []
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self.segments_list(self.bindings[node.id])
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.segments(e) for e in node.elts]
        return [self.segments(node)]

    def segments(self, node: ast.expr) -> list[SourceSegment]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [SourceSegment(node.value, node.lineno, self.path)]
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self.segments(self.bindings[node.id])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.segments(node.left) + self.segments(node.right)
        if isinstance(node, ast.JoinedStr):
            raise _Unresolved("f-string")
        if isinstance(node, ast.Call) and _is_read_text_of_path(node):
            path = self.cu_file_of(node)
            return [SourceSegment(self.read_source_file(path), 1, path)]
        raise _Unresolved(ast.unparse(node))

    def cu_file_of(self, node: ast.Call) -> str:
        """`open("k.cu").read()` / `Path("k.cu").read_text()` -> the absolute path of k.cu."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.endswith((".cu", ".cuh")):
                return str((self.folder / sub.value).resolve())
        raise _Unresolved(ast.unparse(node))


def _is_read_text_of_path(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and node.func.attr in ("read", "read_text")


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
