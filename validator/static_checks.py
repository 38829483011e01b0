"""Static anti-cheat checks (docs/validator.md#static-checks): AST rules on the candidate module, token scans on its
CUDA strings.

`check_static` never imports or runs the candidate. Errors reject the candidate; flags are recorded and shown.
Policies: `ide` (torch glue and libraries allowed) and `strict` (benchmarks and RL rewards: a custom kernel launched
from `forward` must do the heavy work). Every message says what is wrong, on which line, and what to do instead.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from .kernel_split import GLOBAL_KERNEL
from .problem import SOURCE_SUFFIXES

POLICIES = ("ide", "strict")

# Every Finding.code, with what it guards against (#N: cheat N of docs/validator.md#cheat-list).
FINDING_CODES = {
    "syntax_error": "the module does not parse",
    "no_model_new": "no `class ModelNew` (an empty file too); strict: none with a forward",
    "reference_reuse": "ModelNew subclasses, instantiates, imports or copies the reference (#3)",
    "try_except_fallback": "try/except or suppress around the kernel path: silent fallback (#2)",
    "dynamic_code": "exec/eval/compile/__import__/importlib: code the checks cannot see (#22)",
    "harness_introspection": "frames, globals, gc, sys.modules: reading the harness (#19)",
    "native_library": "ctypes/cffi/load_library: native code outside the compile path",
    "concurrency": "threads, processes, async tasks in Python (#10)",
    "host_thread": "std::thread/pthread/fork/host callbacks in C++ (#10)",
    "tensor_subclass": "Tensor subclasses, __torch_function__/__torch_dispatch__, lazy results (#11)",
    "monkey_patch": "assignments to attributes of torch, time or other modules (#12, #13)",
    "global_state": "torch.set_*/backend setters that change the reference's numerics too (#13)",
    "cuda_graph": "CUDA graph capture/replay (#21)",
    "torch_compile": "torch.compile/jit/dynamo: a compiler writes the kernel",
    "identity_cache": "data_ptr()/id()/_version reads: result caches keyed by identity (#7)",
    "forward_state": "forward writes self/module state, memoization: result caches, batch-and-skip (#7, #8)",
    "persistent_state": "C++ static or file-scope tensors/buffers kept between calls (#7, #8)",
    "file_io": "file reads/writes other than kernel sources at import time",
    "side_stream": "work on a stream other than the current one (#9)",
    "no_custom_kernel": "strict: no __global__ or @triton.jit kernel (#1)",
    "kernel_not_invoked": "strict: forward never launches the compiled kernel (#4)",
    "torch_compute": "strict: PyTorch/NumPy compute in forward (#1)",
    "host_compute": "strict: ATen/LibTorch compute in the C++ host code (#1)",
    "library_call": "cuBLAS/cuDNN/CUTLASS GEMM: error in strict, flag in ide (#1)",
    "unsupported_import": "strict: imports beyond torch/triton/cupy/numpy and plain standard-library helpers",
    "dynamic_attribute": "strict: module attributes looked up by computed names",
    "default_stream_launch": "flag: `<<<grid, block>>>` on the legacy default stream",
    "precision_downgrade": "flag: fp16/bf16/TF32 in an fp32 task (#13)",
    "fast_math": "flag: --use_fast_math",
    "environment_write": "flag: os.environ writes",
}


@dataclass(frozen=True)
class Finding:
    """One static-check result: `error` rejects the candidate, `flag` is recorded and surfaced to the user."""

    code: str
    message: str
    line: int | None
    severity: str  # "error" | "flag"


def check_static(candidate_source: str, policy: str, reference_source: str | None = None,
                 cuda_file: bool = False) -> list[Finding]:
    """Check a candidate `ModelNew` module, or a bare .cu/.cuh translation unit: `cuda_file`, or a text that is not
    Python and looks like CUDA.

    `reference_source`, when given, names the reference classes the candidate must not reuse and tells whether
    the task is fp32 (precision-downgrade flags apply only then). Findings are sorted by line.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown validation policy {policy!r}: use one of {', '.join(POLICIES)}")
    report = _Report()
    fp32_task = reference_source is None or not reference_uses_low_precision(reference_source)
    tree = None  # a .cu file is never read as Python (one of preprocessor lines only would parse: comments)
    if not cuda_file:
        try:
            tree = ast.parse(candidate_source)
        except SyntaxError as error:
            if not _looks_like_cuda(candidate_source):
                report.error(
                    "syntax_error",
                    error.lineno,
                    f"Python syntax error: {error.msg}",
                    "fix the syntax so the module can be parsed (the candidate must be a complete Python module)",
                )
                return report.sorted()
    if tree is None:
        scanner = _CudaScanner(report, policy, fp32_task)
        scanner.scan([_CodeText(candidate_source, candidate_source, 1)])
        scanner.finish_standalone()
        return report.sorted()
    _PythonChecker(tree, candidate_source, policy, reference_source, fp32_task, report).run()
    return report.sorted()


# --------------------------------------------------------------------------------------------------------------
# Name tables


_LOW_PRECISION_REFERENCE = re.compile(r"float16|bfloat16|\.half\(\)|\bhalf\b|\.bfloat16\(\)|float8")
_LOW_PRECISION_NAMES = {"float16", "half", "bfloat16", "fp16", "bf16"}


def reference_uses_low_precision(reference_source: str) -> bool:
    """Whether the reference computes in a half-precision (or float8) dtype: `torch.float16`, `x.half()`,
    `dtype="bfloat16"`... in its code. Names and prose do not count: `half = d // 2` in a rotary embedding or
    "rotate half" in a docstring leave an fp32 task fp32. A reference that does not parse is read as text."""
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return _LOW_PRECISION_REFERENCE.search(reference_source) is not None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr in _LOW_PRECISION_NAMES or node.attr.startswith("float8")):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in _LOW_PRECISION_NAMES or node.value.startswith("float8")):
            return True
    return False

# Top-level modules a strict candidate may import; everything else is refused (it could be the reference module).
_STRICT_IMPORTS = {
    "torch", "triton", "cupy", "numpy", "math", "os", "pathlib", "typing", "typing_extensions", "functools",
    "itertools", "dataclasses", "enum", "operator", "warnings", "textwrap", "string", "re", "collections", "abc",
    "__future__", "cuda", "sys", "random", "logging", "contextlib", "copy", "tempfile", "time",
}

# module prefix -> (code, what it gives a cheater)
_BANNED_MODULES = {
    "threading": ("concurrency", "background threads can launch work after the timer stops"),
    "_thread": ("concurrency", "background threads can launch work after the timer stops"),
    "multiprocessing": ("concurrency", "child processes can do the work outside the timed region"),
    "torch.multiprocessing": ("concurrency", "child processes can do the work outside the timed region"),
    "concurrent": ("concurrency", "executor threads can do the work outside the timed region"),
    "asyncio": ("concurrency", "asynchronous tasks can do the work outside the timed region"),
    "subprocess": ("concurrency", "child processes can do the work outside the timed region"),
    "signal": ("concurrency", "signal handlers run code outside the timed region"),
    "pty": ("concurrency", "child processes can do the work outside the timed region"),
    "sched": ("concurrency", "scheduled callbacks run outside the timed region"),
    "ctypes": ("native_library", "it loads and calls native code that bypasses the compile path and the checks"),
    "_ctypes": ("native_library", "it loads and calls native code that bypasses the compile path and the checks"),
    "cffi": ("native_library", "it loads and calls native code that bypasses the compile path and the checks"),
    "importlib": ("dynamic_code", "it imports modules chosen at run time, e.g. the reference"),
    "runpy": ("dynamic_code", "it runs code chosen at run time"),
    "marshal": ("dynamic_code", "it loads code objects at run time"),
    "code": ("dynamic_code", "it runs code chosen at run time"),
    "codeop": ("dynamic_code", "it compiles code at run time"),
    "builtins": ("harness_introspection", "it can replace built-in functions the harness relies on"),
    "inspect": ("harness_introspection", "it can read the harness's frames, e.g. the reference output"),
    "gc": ("harness_introspection", "gc.get_objects() can find the reference output tensor"),
    "traceback": ("harness_introspection", "it can walk the harness's frames"),
    "pickle": ("file_io", "it persists or loads data outside the kernel"),
    "shelve": ("file_io", "it persists results across calls and processes"),
    "torch.utils._python_dispatch": ("tensor_subclass", "dispatch modes compute lazily behind the harness's back"),
    "torch.overrides": ("tensor_subclass", "torch-function modes compute lazily behind the harness's back"),
    "torch._dynamo": ("torch_compile", "compiled graphs are not the candidate's own kernel"),
    "torch._inductor": ("torch_compile", "compiled graphs are not the candidate's own kernel"),
}

_DYNAMIC_BUILTINS = {"exec", "eval", "compile", "__import__", "breakpoint"}
_INTROSPECTION_BUILTINS = {"globals", "vars", "locals"}
_INTROSPECTION_ATTRS = {
    "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__", "f_back", "f_locals", "f_globals",
    "tb_frame", "gi_frame", "cr_frame", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks",
}
_IDENTITY_ATTRS = {"data_ptr", "_version", "_cdata"}
_MUTATING_METHODS = {
    "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove", "discard",
    "appendleft", "extendleft", "__setitem__", "register_buffer", "register_parameter", "set_",
}
_MEMOIZE_DECORATORS = {"functools.lru_cache", "functools.cache", "functools.cached_property"}

_SIDE_STREAM_CALLS = {
    "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.stream", "torch.cuda.set_stream",
    "torch.cuda.StreamContext", "torch.Stream", "torch.cuda.streams.Stream", "cupy.cuda.Stream",
    "cupy.cuda.ExternalStream", "torch.cuda.use_mem_pool",
}
_CUDA_GRAPH_PREFIXES = ("torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
                        "torch.cuda.graphs", "torch.cuda.graph_pool_handle", "cupy.cuda.graph")
_COMPILE_PREFIXES = ("torch.compile", "torch.jit", "torch._dynamo", "torch._inductor", "torch.export")
_TENSOR_CLASSES = {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter",
                   "torch.nn.parameter.Parameter"}
_OS_PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "kill", "killpg", "posix_spawn", "posix_spawnp",
                     "execv", "execve", "execl", "execle", "execlp", "execvp", "execvpe", "spawnv", "spawnve",
                     "spawnl", "spawnle", "register_at_fork"}
_OS_FILE_CALLS = {"open", "remove", "unlink", "rename", "replace", "rmdir", "removedirs", "write", "read",
                  "truncate", "symlink", "link", "chmod", "chown", "mkfifo"}
_PATH_ONLY_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "touch", "unlink"}
_PATH_IO_METHODS = {"open", "rename", "replace", "rmdir", "mkdir"}
_DATA_FILE_CALLS = {"torch.save", "torch.load", "numpy.save", "numpy.load", "numpy.savez", "numpy.savetxt",
                    "numpy.loadtxt", "numpy.fromfile", "numpy.memmap", "torch.from_file", "cupy.load", "cupy.save"}
_GLOBAL_STATE_PREFIXES = ("torch.set_", "torch.use_deterministic_algorithms", "torch.cuda.set_", "torch._C._set",
                          "torch.cuda.memory.set_", "torch.cuda.memory._set")
_BACKEND_STATE_CALLS = {"flags", "sdp_kernel", "enable_flash_sdp", "enable_math_sdp", "enable_mem_efficient_sdp",
                        "enable_cudnn_sdp", "preferred_linalg_library", "preferred_blas_library"}

# torch.<name> calls that allocate, view, move or describe tensors: the glue a strict candidate may use.
_TORCH_GLUE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "linspace", "tensor", "as_tensor", "as_strided", "from_numpy", "from_dlpack", "asarray", "rand",
    "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "manual_seed", "Generator", "device",
    "dtype", "Size", "is_tensor", "is_floating_point", "numel", "no_grad", "inference_mode", "enable_grad",
    "set_grad_enabled", "get_default_dtype", "finfo", "iinfo", "broadcast_shapes", "result_type", "promote_types",
    "can_cast", "view_as_real", "view_as_complex", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
    "permute", "transpose", "t", "movedim", "moveaxis", "narrow", "select", "split", "chunk", "unbind", "cat",
    "concat", "concatenate", "stack", "swapaxes", "swapdims", "is_grad_enabled", "Tensor", "empty_cache",
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int8", "int16", "int32", "int64",
    "long", "int", "uint8", "bool", "complex64", "cfloat", "inf", "nan", "pi", "e", "contiguous_format",
    "channels_last", "preserve_format", "strided", "__version__",
}
_TORCH_GLUE_NAMESPACES = ("torch.cuda.", "torch.utils.", "torch.nn.init.", "torch.autograd.", "torch.library.",
                          "torch.types.", "torch.version.", "torch.backends.", "torch.Tensor.")
_TORCH_COMPUTE_NAMESPACES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.",
                             "torch.sparse.", "torch.ops.aten.", "torch.ops.prims.", "torch._C._nn.",
                             "torch._C._VariableFunctions.", "torch._C._linalg.", "torch._C._fft.")
_NN_CONTAINERS = {"Module", "Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "Sequential",
                  "Identity", "init", "parameter", "Buffer", "utils"}
_NUMERIC_LIBS = ("numpy.", "cupy.", "cupyx.")
_NUMERIC_GLUE = {"asarray", "ascontiguousarray", "empty", "empty_like", "zeros", "zeros_like", "from_dlpack", "prod",
                 "dtype", "float32", "float64", "int32", "int64", "RawKernel", "RawModule", "cuda", "ndarray",
                 "intp", "uint32", "uint64", "get_array_module", "ElementwiseKernel"}

# Operator names that are compute when called on tensors (Python methods, at::/torch:: functions, C++ methods).
_COMPUTE_OPS = {
    "matmul", "mm", "bmm", "mv", "dot", "vdot", "addmm", "addmv", "addbmm", "baddbmm", "einsum", "linear", "bilinear",
    "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "relu", "relu_", "relu6", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "softmin", "softplus",
    "mish", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "logsigmoid", "exp",
    "exp_", "log", "log1p", "log2", "expm1", "sqrt", "rsqrt", "pow", "square", "abs", "neg", "reciprocal", "sin",
    "cos", "erf", "sum", "nansum", "mean", "nanmean", "prod", "std", "var", "norm", "max", "min", "amax", "amin",
    "argmax", "argmin", "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "sort", "argsort", "topk",
    "kthvalue", "median", "clamp", "clamp_", "clip", "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_",
    "addcmul", "addcdiv", "lerp", "where", "masked_fill", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "dropout", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool2d",
    "interpolate", "maximum", "minimum", "fmax", "fmin", "floor", "ceil", "round", "sign", "scatter",
    "scatter_add", "gather", "index_select", "tril", "triu", "diag", "trace", "outer", "kron", "cross", "cdist",
    "mse_loss", "l1_loss", "cross_entropy", "nll_loss", "kl_div", "smooth_l1_loss", "huber_loss",
    "cosine_similarity", "pairwise_distance", "hinge_embedding_loss", "margin_ranking_loss",
    "triplet_margin_loss", "normalize", "embedding", "lstm", "gru", "rnn_tanh", "scaled_dot_product_attention",
    "multi_head_attention_forward", "unfold", "fold", "pixel_shuffle", "glu", "frobenius_norm", "nuclear_norm",
    "threshold", "hardshrink", "softshrink", "tanhshrink", "prelu", "rrelu", "logit", "any", "all", "count_nonzero",
    "__matmul__", "__rmatmul__", "__imatmul__",
}
# Names only ATen defines (no C/CUDA math function shares them): unqualified calls after `using namespace at`.
_ATEN_ONLY_OPS = {
    "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "einsum", "linear", "bilinear", "conv1d", "conv2d",
    "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "softmax", "log_softmax",
    "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "relu", "gelu", "silu", "leaky_relu",
    "hardtanh", "logsumexp", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool2d", "mse_loss", "cross_entropy", "nll_loss", "scaled_dot_product_attention", "cumsum",
    "cumprod", "argmax", "argmin", "amax", "amin",
}
_OPERATOR_MATMUL = {"operator.matmul", "operator.imatmul", "operator.__matmul__", "operator.__imatmul__"}
_KERNEL_BUILDERS = {"cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel", "cupy.ReductionKernel",
                    "torch.cuda._compile_kernel", "torch.cuda.jiterator._create_jit_fn"}

_CPP_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "do", "else", "decltype", "alignof",
                 "static_assert", "defined", "__launch_bounds__", "__align__", "alignas", "noexcept", "throw"}


def _looks_like_cuda(text: str) -> bool:
    return "__global__" in text or "#include" in text


# --------------------------------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class _CodeText:
    """A CUDA/C++ source text inside the candidate: `text` is what is scanned, `raw` its source-file spelling."""

    text: str
    raw: str
    first_line: int

    def line_of(self, offset: int, token: str) -> int:
        """Map an offset in `text` to a line of the candidate file (also for escaped or concatenated strings)."""
        if self.text.count("\n") == self.raw.count("\n"):
            return self.first_line + self.text.count("\n", 0, offset)
        occurrence = self.text.count(token, 0, offset)
        position = -1
        for _ in range(occurrence + 1):
            position = self.raw.find(token, position + 1)
            if position < 0:
                return self.first_line
        return self.first_line + self.raw.count("\n", 0, position)


class _Report:
    """Collects findings, one per (code, line)."""

    def __init__(self) -> None:
        self.findings: dict[tuple[str, int | None], Finding] = {}

    def error(self, code: str, line: int | None, what: str, fix: str) -> None:
        self._add(code, line, what, fix, "error")

    def flag(self, code: str, line: int | None, what: str, fix: str) -> None:
        self._add(code, line, what, fix, "flag")

    def add(self, severity: str, code: str, line: int | None, what: str, fix: str) -> None:
        self._add(code, line, what, fix, severity)

    def _add(self, code: str, line: int | None, what: str, fix: str, severity: str) -> None:
        key = (code, line)
        existing = self.findings.get(key)
        if existing is not None and (existing.severity == "error" or severity == "flag"):
            return
        where = f"line {line}: " if line is not None else ""
        self.findings[key] = Finding(code, f"{where}{what}; {fix}.", line, severity)

    def sorted(self) -> list[Finding]:
        return sorted(self.findings.values(), key=lambda f: (f.line or 0, f.severity != "error", f.code))


# --------------------------------------------------------------------------------------------------------------
# Python


def _root_name(node: ast.AST) -> str | None:
    """`a` for `a.b[c].d(...)`."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def _self_attribute(node: ast.AST) -> str | None:
    """`x` for `self.x`, `self.x.y[...]`, `self.x(...)`."""
    chain = node
    last_attr = None
    while True:
        if isinstance(chain, ast.Attribute):
            last_attr = chain.attr
            chain = chain.value
        elif isinstance(chain, ast.Subscript):
            chain = chain.value
        elif isinstance(chain, ast.Call):
            chain = chain.func
        elif isinstance(chain, ast.Name):
            return last_attr if chain.id == "self" else None
        else:
            return None


def _plain_chain(node: ast.AST) -> list[str] | None:
    """["self", "ext", "f"] for `self.ext.f` or `self.ext.f[grid]`; None when the chain holds a call or anything else."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return parts[::-1]
        else:
            return None


def _chain_is_extension(chain: list[str] | None, names: set[str], self_attrs: set[str]) -> bool:
    if not chain:
        return False
    return chain[0] in names or (chain[0] == "self" and len(chain) > 1 and chain[1] in self_attrs)


def _string_constants(node: ast.AST) -> Iterator[str]:
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child.value


def _docstring_nodes(nodes: list[ast.AST]) -> set[int]:
    ids = set()
    for node in nodes:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


class _PythonChecker:
    """All Python-side rules; collects the CUDA strings and hands them to `_CudaScanner`."""

    def __init__(self, tree: ast.Module, source: str, policy: str, reference_source: str | None, fp32_task: bool,
                 report: _Report) -> None:
        self.tree = tree
        self.nodes = list(ast.walk(tree))  # walked once; most rules scan every node
        self.source = source
        self.source_lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source)  # the tokenizer's line breaks
        self.policy = policy
        self.strict = policy == "strict"
        self.fp32_task = fp32_task
        self.report = report
        self.reference_classes, self.reference_forwards = _reference_classes(reference_source)
        self.assignments: dict[str, list[ast.AST]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assignments.setdefault(target.id, []).append(node.value)
        self.aliases = self._collect_aliases()
        self.bound_names = self._collect_bound_names()
        self.top_defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        self.model_new = self._find_model_new()
        self.triton_kernels = self._triton_kernels()
        self.code_texts = self._code_texts()
        self.torch_library_namespaces = {
            ns for text in self.code_texts for ns in re.findall(r"TORCH_LIBRARY(?:_IMPL)?\s*\(\s*(\w+)", text.text)}
        self.self_attr_classes = self._self_attribute_classes()
        self.module_lambdas = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                               and isinstance(n.value, ast.Lambda) for t in n.targets if isinstance(t, ast.Name)}
        self.forward_functions = self._forward_reachable()
        self.forward_function_of = {id(n): fn for fn in self.forward_functions for n in ast.walk(fn)}
        self.forward_locals = {id(fn): _local_names(fn) for fn in self.forward_functions}
        self.module_state_names = self._module_state_names()
        self.call_funcs = {id(n.func) for n in self.nodes if isinstance(n, ast.Call)}
        self.attribute_bases = {id(n.value) for n in self.nodes if isinstance(n, ast.Attribute)}
        self.extension_names, self.extension_attrs, self.layer_attrs = self._extension_and_layer_bindings()

    # ---- name resolution ----

    def _collect_aliases(self) -> dict[str, str]:
        aliases: dict[str, str] = {}
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for item in node.names:
                    if item.asname:
                        aliases[item.asname] = item.name
                    else:
                        top = item.name.split(".")[0]
                        aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for item in node.names:
                    aliases[item.asname or item.name] = f"{node.module}.{item.name}"
        for _ in range(3):  # `F = torch.nn.functional`, `mm = getattr(torch, "matmul")`, chains of those
            for node in self.nodes:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    name = node.targets[0].id
                    if name in aliases:
                        continue
                    qualified = self._qualify_with(node.value, aliases)
                    if qualified is not None and "." in qualified:
                        aliases[name] = qualified
        return aliases

    def _collect_bound_names(self) -> set[str]:
        bound = set()
        for node in self.nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
        return bound - set(self.aliases)

    def _qualify_with(self, node: ast.AST, aliases: dict[str, str]) -> str | None:
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._qualify_with(node.value, aliases)
            return f"{base}.{node.attr}" if base else None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            base = self._qualify_with(node.args[0], aliases)
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def qualify(self, node: ast.AST) -> str | None:
        """Dotted name of what `node` refers to (`F.relu` -> `torch.nn.functional.relu`); None when unknown."""
        return self._qualify_with(node, self.aliases)

    def builtin_name(self, node: ast.AST) -> str | None:
        """`exec` for a call of the real builtin `exec` (not a local of that name)."""
        if isinstance(node, ast.Name) and node.id not in self.bound_names and node.id not in self.aliases:
            return node.id
        return None

    def is_module_alias(self, name: str | None) -> bool:
        return name is not None and name in self.aliases

    # ---- structure ----

    def _find_model_new(self) -> ast.ClassDef | None:
        node = self.top_defs.get("ModelNew")
        return node if isinstance(node, ast.ClassDef) else None

    def _triton_kernels(self) -> set[str]:
        names = set()
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    qualified = self.qualify(target) or ""
                    if qualified.startswith("triton.") and qualified.split(".")[-1] in {"jit", "autotune", "heuristics"}:
                        names.add(node.name)
        return names

    def _methods(self, cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def _self_attribute_classes(self) -> dict[str, str]:
        """`self.block = Block(...)` -> {"block": "Block"} for candidate-defined classes (submodules forward runs)."""
        found = {}
        for node in self.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                if isinstance(self.top_defs.get(node.value.func.id), ast.ClassDef):
                    for target in node.targets:
                        attribute = _self_attribute(target) if isinstance(target, ast.Attribute) else None
                        if attribute:
                            found[attribute] = node.value.func.id
        return found

    def _class_methods_run_by_forward(self, class_name: str) -> list[ast.AST]:
        target = self.top_defs.get(class_name)
        if not isinstance(target, ast.ClassDef):
            return []
        return [m for name, m in self._methods(target).items() if name != "__init__"]

    def _forward_reachable(self) -> list[ast.AST]:
        """`forward` of ModelNew plus every method, module function and helper class it can reach by name."""
        if self.model_new is None:
            return []
        methods = self._methods(self.model_new)
        if "forward" not in methods:
            return []
        seen: dict[int, ast.AST] = {}
        queue: list[ast.AST] = [methods["forward"]]
        while queue:
            function = queue.pop()
            if id(function) in seen or getattr(function, "name", None) in self.triton_kernels:
                continue
            seen[id(function)] = function
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    if node.attr in methods:
                        queue.append(methods[node.attr])
                    elif node.attr in self.self_attr_classes:
                        queue.extend(self._class_methods_run_by_forward(self.self_attr_classes[node.attr]))
                elif isinstance(node, ast.Name) and node.id in self.module_lambdas:
                    queue.append(self.module_lambdas[node.id])
                elif isinstance(node, ast.Name) and node.id in self.top_defs and node.id != "ModelNew":
                    target = self.top_defs[node.id]
                    if isinstance(target, ast.ClassDef):
                        queue.extend(self._class_methods_run_by_forward(node.id))
                    else:
                        queue.append(target)
        return list(seen.values())

    def in_forward(self, node: ast.AST) -> bool:
        return id(node) in self.forward_function_of

    def _module_state_names(self) -> set[str]:
        names = set(self.top_defs)
        for node in self.tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.add(leaf.id)
        return names - set(self.aliases)

    def _is_extension_value(self, value: ast.AST, names: set[str], attrs: set[str]) -> bool:
        """A value holding compiled candidate code: load_inline/load/RawKernel/_compile_kernel results and parts."""
        node = value
        while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Call):
                qualified = self.qualify(node.func) or ""
                if qualified.startswith("torch.utils.cpp_extension.load") or qualified in _KERNEL_BUILDERS:
                    return True
                node = node.func
            else:
                node = node.value
        return _chain_is_extension(_plain_chain(value), names | self.triton_kernels, attrs)

    def _extension_and_layer_bindings(self) -> tuple[set[str], set[str], set[str]]:
        names: set[str] = set()
        attrs: set[str] = set()
        layers: set[str] = set()
        for _ in range(3):
            for node in self.nodes:
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                is_extension = self._is_extension_value(node.value, names, attrs)
                holds_layer = any(self._is_compute_layer(c.func) for c in ast.walk(node.value) if isinstance(c, ast.Call))
                for target in targets:
                    if isinstance(target, ast.Name) and is_extension:
                        names.add(target.id)
                    attribute = _self_attribute(target) if isinstance(target, ast.Attribute) else None
                    if attribute and is_extension:
                        attrs.add(attribute)
                    if attribute and holds_layer:
                        layers.add(attribute)
                    if isinstance(target, ast.Name) and holds_layer:
                        layers.add(target.id)
        return names, attrs, layers

    def _is_compute_layer(self, func: ast.AST) -> bool:
        qualified = self.qualify(func) or ""
        if not qualified.startswith("torch.nn.") or qualified.startswith(("torch.nn.functional.", "torch.nn.init.")):
            return False
        return qualified.split(".")[2] not in _NN_CONTAINERS

    def is_extension_call(self, call: ast.Call) -> bool:
        """A call of the compiled module itself (`ext.f(...)`, `self.ext.f(...)`, `kernel[grid](...)`), not of a
        method on its result (`ext.f(x).sum()`)."""
        func = call.func
        if _chain_is_extension(_plain_chain(func), self.extension_names | self.triton_kernels, self.extension_attrs):
            return True
        qualified = self.qualify(func) or ""
        return qualified.startswith("torch.ops.") and not qualified.startswith(
            ("torch.ops.aten.", "torch.ops.prims.")) and qualified.split(".")[2] in self.torch_library_namespaces

    # ---- run ----

    def run(self) -> None:
        self._check_model_new()
        self._check_imports()
        for node in self.nodes:
            if isinstance(node, ast.Call):
                self._check_call(node)
            elif isinstance(node, ast.Attribute):
                self._check_attribute(node)
            elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and node.handlers:
                self._check_try(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                self._check_store(node)
            elif isinstance(node, ast.ClassDef):
                self._check_class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._check_function(node)
            elif isinstance(node, ast.Name) and node.id == "__builtins__":
                self.report.error("harness_introspection", node.lineno, "uses `__builtins__`, the interpreter's built-ins",
                                  _FIXES["harness_introspection"])
            elif isinstance(node, (ast.Global, ast.Nonlocal)) and self.in_forward(node):
                self.report.error(
                    "forward_state", node.lineno,
                    f"`{'global' if isinstance(node, ast.Global) else 'nonlocal'} {', '.join(node.names)}` lets forward keep state between calls (a result cache)",
                    "compute every output from the current inputs; keep no state that forward writes")
            elif isinstance(node, ast.With):
                self._check_with(node)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and self.strict and self.in_forward(node):
                self.report.error(
                    "torch_compute", node.lineno,
                    "the `@` operator runs a PyTorch/cuBLAS matrix multiply inside forward",
                    "in strict mode the matrix multiply must run in your own __global__ kernel")
        scanner = _CudaScanner(self.report, self.policy, self.fp32_task)
        scanner.scan(self.code_texts)
        self._check_fast_math()
        if self.strict:
            self._check_kernel_invoked(scanner)

    def _source_segment(self, node: ast.AST) -> str | None:
        """`ast.get_source_segment` without re-splitting the file for every node (col offsets are UTF-8 bytes)."""
        if getattr(node, "end_lineno", None) is None:
            return None
        lines = self.source_lines[node.lineno - 1:node.end_lineno]
        if not lines:
            return None
        if len(lines) == 1:
            return lines[0].encode()[node.col_offset:node.end_col_offset].decode(errors="replace")
        first = lines[0].encode()[node.col_offset:].decode(errors="replace")
        last = lines[-1].encode()[:node.end_col_offset].decode(errors="replace")
        return "".join([first, *lines[1:-1], last])

    def _code_texts(self) -> list[_CodeText]:
        """Non-docstring string literals that look like C/C++/CUDA source."""
        docstrings = _docstring_nodes(self.nodes)
        texts = []
        for node in self.nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
            elif isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)
            else:
                continue
            if not ("#include" in text or "__global__" in text or "torch::" in text or "at::" in text
                    or ("{" in text and ";" in text)):
                continue
            raw = self._source_segment(node) or text
            texts.append(_CodeText(text, raw, node.lineno))
        return texts

    # ---- individual rules ----

    def _check_model_new(self) -> None:
        if self.model_new is None:
            assigned = [n for n in self.tree.body if isinstance(n, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in n.targets)]
            if assigned:
                self.report.error(
                    "reference_reuse", assigned[0].lineno,
                    "`ModelNew` is bound to an existing class instead of being defined",
                    "define `class ModelNew(nn.Module)` whose forward launches your kernel")
            else:  # nothing to run against the reference, in either policy
                what = "the candidate file is empty" if not self.source.strip() else "the candidate defines none"
                self.report.error(
                    "no_model_new", None, f"no class ModelNew: {what}",
                    "the candidate must define `class ModelNew(nn.Module)` at the top level, with the reference's "
                    "constructor and forward signature, whose forward runs your kernel")
            return
        for base in self.model_new.bases:
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            copies_reference = (base_name in self.top_defs and isinstance(self.top_defs[base_name], ast.ClassDef)
                                and self._is_reference_copy(self.top_defs[base_name]))
            if (base_name is not None and self._is_reference_class(base_name)) or copies_reference:
                self.report.error(
                    "reference_reuse", self.model_new.lineno,
                    f"`ModelNew` subclasses the reference class `{base_name}`, so the reference does the work",
                    "subclass `nn.Module` and implement forward with your own kernel")
        if self._is_reference_copy(self.model_new):
            self.report.error(
                "reference_reuse", self.model_new.lineno,
                "`ModelNew.forward` is a copy of the reference forward",
                "replace the PyTorch operations in forward with a call into your compiled kernel")
        inherits = any((self.qualify(b) or "") != "torch.nn.Module" for b in self.model_new.bases)
        if "forward" not in self._methods(self.model_new) and self.strict and not inherits:
            self.report.error(
                "no_model_new", self.model_new.lineno, "`ModelNew` defines no forward method",
                "define `forward` with the reference's signature and launch your kernel from it")

    def _is_reference_copy(self, cls: ast.ClassDef) -> bool:
        forward = self._methods(cls).get("forward")
        if forward is None or not self.reference_forwards:
            return False
        return ast.dump(ast.Module(body=forward.body, type_ignores=[])) in self.reference_forwards

    def _check_imports(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                modules = [(item.name, node.lineno) for item in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    self.report.error(
                        "reference_reuse", node.lineno, "relative import from a local module (it may be the reference)",
                        "keep the candidate self-contained: import only torch, triton, cupy and the standard library")
                    continue
                modules = [(node.module or "", node.lineno)] + [
                    (f"{node.module}.{item.name}", node.lineno) for item in node.names]
                if self.strict and any(item.name == "*" for item in node.names):
                    self.report.error("unsupported_import", node.lineno, f"`from {node.module} import *` hides which names are used",
                                      "import the names you use explicitly (e.g. `from torch.utils.cpp_extension import load_inline`)")
                for item in node.names:
                    if item.name in self.reference_classes:
                        self.report.error(
                            "reference_reuse", node.lineno, f"imports the reference class `{item.name}`",
                            "do not import the reference; implement ModelNew with your own kernel")
            else:
                continue
            for module, line in modules:
                self._check_module_name(module, line)

    def _check_module_name(self, module: str, line: int) -> None:
        for prefix, (code, why) in _BANNED_MODULES.items():
            if module == prefix or module.startswith(prefix + "."):
                self.report.error(code, line, f"imports `{module}`: {why}",
                                  f"remove the `{prefix}` import; {_FIXES[code]}")
                return
        top = module.split(".")[0]
        if module == "os" or module.startswith("os."):
            last = module.split(".")[-1]
            if last in _OS_PROCESS_CALLS:
                self.report.error("concurrency", line, f"imports `{module}`, which starts processes",
                                  _FIXES["concurrency"])
        if self.strict and top not in _STRICT_IMPORTS and top:
            self.report.error(
                "unsupported_import", line, f"imports `{module}`, which strict mode does not allow",
                "import only torch, triton, cupy, numpy and the standard-library helpers (math, os, typing, ...)")

    def _check_call(self, call: ast.Call) -> None:
        line = call.lineno
        in_forward = self.in_forward(call)
        qualified = self.qualify(call.func)
        builtin = self.builtin_name(call.func)
        if builtin in _DYNAMIC_BUILTINS:
            self.report.error("dynamic_code", line, f"calls `{builtin}()`, which runs code the checks cannot see",
                              _FIXES["dynamic_code"])
        elif builtin in _INTROSPECTION_BUILTINS:
            self.report.error("harness_introspection", line,
                              f"calls `{builtin}()`, which exposes or rewrites namespaces outside the candidate",
                              _FIXES["harness_introspection"])
        elif builtin in {"id", "hash"} and in_forward:
            self.report.error("identity_cache", line,
                              f"reads `{builtin}()` of an object in forward: object identity keys a result cache",
                              _FIXES["identity_cache"])
        elif builtin in {"setattr", "delattr"} and call.args:
            target = call.args[0]
            if self.is_module_alias(_root_name(target)):
                self.report.error("monkey_patch", line, f"`{builtin}` changes an attribute of module `{self.qualify(target)}`",
                                  _FIXES["monkey_patch"])
            elif in_forward and (_root_name(target) == "self" or _root_name(target) in self.module_state_names):
                self.report.error("forward_state", line, f"`{builtin}` writes state in forward (a result cache)",
                                  _FIXES["forward_state"])
        elif builtin == "getattr" and len(call.args) >= 2 and not isinstance(call.args[1], ast.Constant):
            if self.strict and self.is_module_alias(_root_name(call.args[0])):
                self.report.error("dynamic_attribute", line,
                                  "looks up a module attribute by a computed name, hiding which function is called",
                                  "call the function by its name (e.g. `torch.empty_like`) so it can be checked")
        elif builtin == "open":
            self._check_open(call, call.args[0] if call.args else None)
        elif builtin == "type" and len(call.args) == 3:
            if any(self.qualify(base) in _TENSOR_CLASSES for base in ast.walk(call.args[1])):
                self.report.error("tensor_subclass", line, "builds a torch.Tensor subclass with type()",
                                  _FIXES["tensor_subclass"])
        if isinstance(call.func, ast.Attribute) and call.func.attr in {"__setattr__", "__delattr__", "__setitem__"}:
            target = call.args[0] if call.args and call.func.attr != "__setitem__" else call.func.value
            if self.is_module_alias(_root_name(target)):
                self.report.error("monkey_patch", line, f"`{call.func.attr}` changes module `{self.qualify(target)}`",
                                  _FIXES["monkey_patch"])
            elif in_forward:
                self.report.error("forward_state", line, f"forward writes state through `{call.func.attr}`",
                                  _FIXES["forward_state"])
        if isinstance(call.func, ast.Name) and self._is_reference_class(call.func.id):
            self.report.error("reference_reuse", line, f"instantiates the reference class `{call.func.id}`",
                              "do not run the reference; implement ModelNew with your own kernel")
        if qualified:
            self._check_qualified_call(call, qualified, in_forward)
        if isinstance(call.func, ast.Attribute):
            self._check_method_call(call, in_forward)
        if self.strict and in_forward and not self.is_extension_call(call):
            self._check_compute_call(call, qualified)

    def _is_reference_class(self, name: str) -> bool:
        """`Model` always; other reference class names unless the candidate defines its own class of that name."""
        return name == "Model" or (name in self.reference_classes and name not in self.top_defs)

    def _check_open(self, call: ast.Call, path: ast.AST | None) -> None:
        """Reading (or writing) a CUDA/C++ source next to the module is the sanctioned way to build; nothing else."""
        if self.in_forward(call):
            self.report.error("file_io", call.lineno, "forward reads or writes files (results can persist on disk)",
                              _FIXES["file_io"])
        elif path is None or not self._names_source_file(path):
            self.report.error("file_io", call.lineno,
                              "opens a file that is not a CUDA/C++ source (file I/O can read harness data or persist results)",
                              _FIXES["file_io"])

    def _names_source_file(self, node: ast.AST, depth: int = 0) -> bool:
        for text in _string_constants(node):
            if text.lower().endswith(SOURCE_SUFFIXES):
                return True
        if depth < 3:
            for child in ast.walk(node):
                if isinstance(child, ast.Name):
                    for value in self._assigned_values(child.id):
                        if self._names_source_file(value, depth + 1):
                            return True
        return False

    def _assigned_values(self, name: str) -> list[ast.AST]:
        return self.assignments.get(name, [])

    def _check_qualified_call(self, call: ast.Call, qualified: str, in_forward: bool) -> None:
        line = call.lineno
        last = qualified.split(".")[-1]
        if qualified in _SIDE_STREAM_CALLS:
            self.report.error("side_stream", line, f"`{qualified}` runs work on a separate CUDA stream the timer does not see",
                              _FIXES["side_stream"])
        elif qualified.startswith(_CUDA_GRAPH_PREFIXES):
            self.report.error("cuda_graph", line, f"`{qualified}` captures/replays CUDA graphs instead of running your kernel per call",
                              "launch your kernel directly from forward; the harness measures eager launches")
        elif qualified.startswith(_COMPILE_PREFIXES):
            self.report.error("torch_compile", line, f"`{qualified}` lets a compiler generate the kernels",
                              "write the kernel yourself (CUDA via load_inline, or Triton) and launch it from forward")
        elif qualified.startswith("torch.ops.load_library") or qualified.startswith("torch.classes.load_library"):
            self.report.error("native_library", line, f"`{qualified}` loads a prebuilt native library",
                              _FIXES["native_library"])
        elif qualified.startswith("os.") and last in _OS_PROCESS_CALLS:
            self.report.error("concurrency", line, f"`{qualified}` starts or signals processes", _FIXES["concurrency"])
        elif ((qualified.startswith("os.") and last in _OS_FILE_CALLS) or qualified in _DATA_FILE_CALLS
              or (qualified.startswith("shutil.") and last != "which") or (qualified.startswith("tempfile.") and in_forward)):
            self.report.error("file_io", line, f"`{qualified}` reads or writes files", _FIXES["file_io"])
        elif qualified.startswith(("sys.modules", "sys.path", "sys._getframe", "sys.settrace", "sys.setprofile",
                                   "sys.meta_path")):
            self.report.error("harness_introspection", line, f"`{qualified}` reaches into the interpreter's modules or frames",
                              _FIXES["harness_introspection"])
        elif qualified.startswith(("torch.utils._python_dispatch", "torch.overrides")) or last in {"_make_subclass", "as_subclass"}:
            self.report.error("tensor_subclass", line, f"`{qualified}` creates tensor subclasses or dispatch modes (lazy results)",
                              _FIXES["tensor_subclass"])
        elif _changes_global_state(qualified):
            self.report.error("global_state", line, f"`{qualified}` changes process-wide PyTorch settings that the reference also uses",
                              "remove it; the harness fixes TF32, precision and allocator settings for both models")
        elif qualified.startswith(("torch.autocast", "torch.cuda.amp", "torch.amp")) and self.fp32_task:
            self.report.flag("precision_downgrade", line, f"`{qualified}` computes an fp32 task in reduced precision",
                             _FIXES["precision_downgrade"])
        if self._is_compute_layer(call.func) and self.strict and in_forward:
            self.report.error("torch_compute", line, f"forward builds and runs the PyTorch layer `{qualified}`",
                              _FIXES["torch_compute"])

    def _check_method_call(self, call: ast.Call, in_forward: bool) -> None:
        method = call.func.attr
        receiver = call.func.value
        line = call.lineno
        if method in _PATH_ONLY_METHODS or (method in _PATH_IO_METHODS and self._is_path(receiver)):
            writes = method not in {"read_text", "read_bytes", "open", "mkdir"}
            if in_forward or writes or (method != "mkdir" and not self._names_source_file(receiver)):
                self.report.error("file_io", line, f"`.{method}()` reads or writes files", _FIXES["file_io"])
        if method in {"half", "bfloat16"} and not call.args and self.fp32_task:
            self.report.flag("precision_downgrade", line, f"`.{method}()` converts an fp32 task to reduced precision",
                             _FIXES["precision_downgrade"])
        if not in_forward or self.is_extension_call(call):
            return
        writes_state = method in _MUTATING_METHODS or (method.endswith("_") and not method.startswith("_"))
        if not writes_state:
            return
        root = _root_name(receiver)
        if root == "self":
            self.report.error("forward_state", line,
                              f"forward mutates `{ast.unparse(receiver)}` with `.{method}()` (state kept between calls)",
                              _FIXES["forward_state"])
        elif root in self.module_state_names and not self._is_local(root, call):
            self.report.error("forward_state", line,
                              f"forward mutates module-level `{ast.unparse(receiver)}` with `.{method}()` (a result cache)",
                              _FIXES["forward_state"])

    def _is_path(self, node: ast.AST, depth: int = 0) -> bool:
        """Whether `node` is a pathlib path (built here, or a name assigned from one)."""
        qualified = self.qualify(_call_target(node)) or ""
        if qualified.startswith(("pathlib", "os.path")):
            return True
        if isinstance(node, ast.Name) and depth < 3:
            return any(self._is_path(v, depth + 1) for v in self._assigned_values(node.id))
        if isinstance(node, (ast.Attribute, ast.Call, ast.BinOp)) and depth < 3:
            inner = node.left if isinstance(node, ast.BinOp) else node.value if isinstance(node, ast.Attribute) else node.func
            return self._is_path(inner, depth + 1)
        return False

    def _is_local(self, name: str, node: ast.AST) -> bool:
        """Whether `name` is a local of the forward-reachable function containing `node` (so not module state)."""
        function = self.forward_function_of.get(id(node))
        return function is not None and name in self.forward_locals[id(function)]

    def _check_compute_call(self, call: ast.Call, qualified: str | None) -> None:
        line = call.lineno
        func = call.func
        if qualified and qualified.startswith("torch."):
            if _is_torch_compute(qualified):
                self.report.error("torch_compute", line, f"forward computes with PyTorch `{qualified}`", _FIXES["torch_compute"])
            return
        if qualified in _OPERATOR_MATMUL:
            self.report.error("torch_compute", line, f"forward multiplies matrices with `{qualified}` (PyTorch matmul)",
                              _FIXES["torch_compute"])
            return
        if qualified and qualified.startswith(_NUMERIC_LIBS):
            if qualified.split(".")[1] not in _NUMERIC_GLUE:
                self.report.error("torch_compute", line, f"forward computes with the library call `{qualified}`",
                                  _FIXES["torch_compute"])
            return
        chain = _plain_chain(func) or []
        if chain and chain[-1] in {"forward", "__call__"}:
            chain = chain[:-1]
        layer = chain[1] if len(chain) == 2 and chain[0] == "self" else chain[0] if len(chain) == 1 else None
        if layer is not None and layer in self.layer_attrs:
            name = f"self.{layer}" if len(chain) == 2 else layer
            self.report.error("torch_compute", line, f"forward runs the PyTorch layer `{name}` (a torch.nn compute layer)",
                              "keep the layer only as a holder of weights (pass its .weight to your kernel) and compute in your kernel")
        elif isinstance(func, ast.Attribute) and func.attr in _COMPUTE_OPS and not self.is_module_alias(_root_name(func)):
            self.report.error("torch_compute", line, f"forward computes with the tensor method `.{func.attr}()`",
                              _FIXES["torch_compute"])

    def _check_attribute(self, node: ast.Attribute) -> None:
        line = node.lineno
        if node.attr in _INTROSPECTION_ATTRS:
            self.report.error("harness_introspection", line,
                              f"accesses `.{node.attr}`, which reaches into frames, globals or the interpreter",
                              _FIXES["harness_introspection"])
        elif node.attr == "__dict__" and self.is_module_alias(_root_name(node)):
            self.report.error("harness_introspection", line, "accesses a module's `__dict__`",
                              _FIXES["harness_introspection"])
        elif node.attr in _IDENTITY_ATTRS:
            self.report.error("identity_cache", line,
                              f"reads `.{node.attr}` in Python: storage addresses and versions key result caches",
                              _FIXES["identity_cache"])
        elif node.attr in self.reference_classes and self.is_module_alias(_root_name(node.value)):
            self.report.error("reference_reuse", line, f"reaches the reference class `{ast.unparse(node)}` through a module",
                              "do not import or run the reference; implement ModelNew with your own kernel")
        elif node.attr in {"_make_subclass", "as_subclass"}:
            self.report.error("tensor_subclass", line, f"uses `{node.attr}` to make tensor subclasses (lazy results)",
                              _FIXES["tensor_subclass"])
        qualified = self.qualify(node)
        if (self.strict and qualified and id(node) not in self.call_funcs and id(node) not in self.attribute_bases
                and isinstance(node.ctx, ast.Load) and self._is_compute_function(qualified)):
            self.report.error("torch_compute", line,
                              f"passes the PyTorch function `{qualified}` around as a value (a hidden fallback)",
                              _FIXES["torch_compute"])
        if qualified in {"torch.float16", "torch.half", "torch.bfloat16"} and self.fp32_task:
            self.report.flag("precision_downgrade", line, f"uses `{qualified}` in an fp32 task",
                             _FIXES["precision_downgrade"])
        if qualified in {"torch.Tensor.__new__", "torch._C.TensorBase.__new__", "torch._C._TensorBase.__new__"}:
            self.report.error("tensor_subclass", line, f"`{qualified}` builds tensors outside the normal constructors",
                              _FIXES["tensor_subclass"])

    @staticmethod
    def _is_compute_function(qualified: str) -> bool:
        last = qualified.split(".")[-1]
        if qualified in _OPERATOR_MATMUL:
            return True
        if qualified.startswith("torch.nn.functional."):
            return True
        return qualified.startswith("torch.") and last in _COMPUTE_OPS and _is_torch_compute(qualified)

    def _check_try(self, node: ast.AST) -> None:
        if self.in_forward(node):
            self.report.error("try_except_fallback", node.lineno,
                              "try/except in code that forward runs: a failing kernel silently falls back to another path",
                              "remove the try/except and let errors surface; the kernel must always be the path taken")
        else:
            self.report.add("error" if self.strict else "flag", "try_except_fallback", node.lineno,
                            "try/except in the candidate can hide a failed kernel build behind a fallback",
                            "remove the try/except; a build error must fail loudly")

    def _check_with(self, node: ast.With) -> None:
        for item in node.items:
            expr = item.context_expr
            qualified = self.qualify(expr.func if isinstance(expr, ast.Call) else expr) or ""
            if qualified == "contextlib.suppress" and self.in_forward(node):
                self.report.error("try_except_fallback", node.lineno,
                                  "`contextlib.suppress` in forward hides kernel failures",
                                  "remove it and let errors surface")

    def _check_store(self, node: ast.AST) -> None:
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target])
        in_forward = self.in_forward(node)
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult) and self.strict and in_forward:
            self.report.error("torch_compute", node.lineno, "`@=` runs a PyTorch/cuBLAS matrix multiply inside forward",
                              "in strict mode the matrix multiply must run in your own __global__ kernel")
        for target in targets:
            for leaf in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                self._check_store_target(leaf, node.lineno, in_forward, node)

    def _check_store_target(self, target: ast.AST, line: int, in_forward: bool, statement: ast.AST) -> None:
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        root = _root_name(target)
        if isinstance(target, ast.Attribute) and target.attr == "__class__":
            self.report.error("tensor_subclass", line, "assigns `__class__`, turning an object into another type",
                              _FIXES["tensor_subclass"])
            return
        if self.is_module_alias(root):
            qualified = self.qualify(target.value if isinstance(target, ast.Subscript) else target) or ast.unparse(target)
            if qualified.startswith("os.environ"):
                self.report.flag("environment_write", line, "writes an environment variable",
                                 "set build options through load_inline arguments instead of os.environ")
                return
            self.report.error("monkey_patch", line, f"assigns to `{ast.unparse(target)}`, changing module `{root}` for everyone",
                              _FIXES["monkey_patch"])
            return
        if not in_forward:
            return
        if root == "self":
            self.report.error("forward_state", line, f"forward writes `{ast.unparse(target)}` (state kept between calls)",
                              _FIXES["forward_state"])
        elif root in self.module_state_names and not self._is_local(root, statement):
            self.report.error("forward_state", line, f"forward writes module-level `{ast.unparse(target)}` (a result cache)",
                              _FIXES["forward_state"])

    def _check_class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            qualified = self.qualify(base)
            if qualified in _TENSOR_CLASSES:
                self.report.error("tensor_subclass", node.lineno,
                                  f"class `{node.name}` subclasses `{qualified}`: its results can compute lazily when compared",
                                  _FIXES["tensor_subclass"])

    def _check_function(self, node: ast.FunctionDef) -> None:
        if node.name in {"__torch_function__", "__torch_dispatch__"}:
            self.report.error("tensor_subclass", node.lineno, f"defines `{node.name}`, which intercepts torch calls",
                              _FIXES["tensor_subclass"])
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if (self.qualify(target) or "") in _MEMOIZE_DECORATORS:
                self.report.error("forward_state", node.lineno, f"`{node.name}` is memoized, so repeated calls return cached results",
                                  _FIXES["forward_state"])
        if self.in_forward(node) or node in self.forward_functions:
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
                        isinstance(default, ast.Call) and self.builtin_name(default.func) in {"dict", "list", "set"}):
                    self.report.error("forward_state", node.lineno,
                                      f"`{node.name}` has a mutable default argument, a hidden cache between calls",
                                      _FIXES["forward_state"])

    def _check_fast_math(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "use_fast_math" in node.value:
                self.report.flag("fast_math", node.lineno, "`--use_fast_math` trades accuracy for speed",
                                 "drop it unless the results stay within the fp32 tolerance on every input distribution")

    def _check_kernel_invoked(self, scanner: "_CudaScanner") -> None:
        if self.model_new is None:
            return
        if not scanner.kernels and not self.triton_kernels and not self._builds_from_source_files():
            self.report.error(
                "no_custom_kernel", self.model_new.lineno,
                "no `__global__` CUDA kernel (or Triton `@triton.jit` kernel) is defined",
                "write a __global__ kernel, build it with load_inline, and launch it from ModelNew.forward")
            return
        called = [c for fn in self.forward_functions for c in ast.walk(fn)
                  if isinstance(c, ast.Call) and self.is_extension_call(c)]
        if not called:
            self.report.error(
                "kernel_not_invoked", self.model_new.lineno,
                "ModelNew.forward never calls the compiled module, so your kernel never runs",
                "call the function exported by load_inline (e.g. `self.ext.my_op(x)`) from forward")
            return
        exports = dict(scanner.exported_host)
        exports.update({name: name for name in self._load_inline_functions()})
        called_names = {c.func.attr for c in called if isinstance(c.func, ast.Attribute)}
        if any(_root_name(c.func) in self.triton_kernels for c in called) or not called_names or not exports:
            return
        if called_names <= set(exports) and not any(scanner.launches_kernel(exports[n]) for n in called_names):
            self.report.error(
                "kernel_not_invoked", self.model_new.lineno,
                f"forward calls {', '.join(sorted(called_names))} but none of them launches a __global__ kernel",
                "launch your kernel (`kernel<<<grid, block, 0, stream>>>(...)`) from the exported host function")

    def _builds_from_source_files(self) -> bool:
        """Kernels in .cu files (`load(sources=[...])`, or sources read at import) are checked in those files."""
        for node in self.nodes:
            if isinstance(node, ast.Call):
                qualified = self.qualify(node.func) or ""
                reads_file = self.builtin_name(node.func) == "open" or (
                    isinstance(node.func, ast.Attribute) and node.func.attr in {"read_text", "read_bytes"})
                if qualified == "torch.utils.cpp_extension.load" or (reads_file and self._names_source_file(node)):
                    return True
        return False

    def _load_inline_functions(self) -> set[str]:
        """Names listed in `load_inline(functions=[...])`: load_inline exports them under the same C++ names."""
        names = set()
        for node in self.nodes:
            if isinstance(node, ast.Call) and (self.qualify(node.func) or "").endswith("load_inline"):
                for keyword in node.keywords:
                    if keyword.arg == "functions":
                        names.update(_string_constants(keyword.value))
        return names


def _is_torch_compute(qualified: str) -> bool:
    """Whether a `torch.*` callable computes (as opposed to allocating, viewing, moving or describing tensors)."""
    if qualified.startswith(_TORCH_COMPUTE_NAMESPACES):
        return True
    if qualified.startswith("torch.Tensor."):
        return qualified.split(".")[2] in _COMPUTE_OPS
    if qualified.startswith(("torch.ops.", "torch._C.")):
        return True
    if qualified.startswith("torch.nn."):
        # torch.nn.<Layer>(...) constructs (checked where it runs); deeper paths reach functional code.
        return len(qualified.split(".")) > 3 and not qualified.startswith(("torch.nn.init.", "torch.nn.utils.",
                                                                           "torch.nn.parameter."))
    if qualified.startswith(_TORCH_GLUE_NAMESPACES):
        return False
    parts = qualified.split(".")
    return len(parts) == 2 and parts[1] not in _TORCH_GLUE


def _changes_global_state(qualified: str) -> bool:
    """torch.set_*, torch.cuda.set_*, backend flag setters: settings the reference (same process) would inherit."""
    if qualified == "torch.set_grad_enabled" or qualified == "torch.cuda.set_stream":
        return False
    if qualified.startswith("torch.backends."):
        return qualified.split(".")[-1] in _BACKEND_STATE_CALLS
    return qualified.startswith(_GLOBAL_STATE_PREFIXES)


def _local_names(function: ast.AST) -> set[str]:
    """Arguments and assigned names of a function, minus those it declares global."""
    declared_global = {n for g in ast.walk(function) if isinstance(g, ast.Global) for n in g.names}
    args = {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
    stores = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return (args | stores) - declared_global


def _call_target(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Name):
            return node
    return node


def _reference_classes(reference_source: str | None) -> tuple[set[str], set[str]]:
    """Names of the reference's classes (always `Model`) and dumps of their forward bodies.

    A user's file often holds the reference and its ModelNew side by side; ModelNew itself is never the reference."""
    names = {"Model"}
    forwards: set[str] = set()
    if reference_source:
        try:
            tree = ast.parse(reference_source)
        except SyntaxError:
            return names, forwards
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name != "ModelNew":
                names.add(node.name)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward":
                        forwards.add(ast.dump(ast.Module(body=item.body, type_ignores=[])))
    return names, forwards


_FIXES = {
    "concurrency": "do all work synchronously inside forward on the current CUDA stream",
    "native_library": "build kernels only through torch.utils.cpp_extension (load_inline/load), NVRTC or Triton",
    "dynamic_code": "write the code directly in the module so it can be checked",
    "harness_introspection": "use only the inputs forward receives; never reach into the caller's frames or modules",
    "file_io": "keep kernel sources in the module (or read only .cu/.cpp sources at import time) and never store results",
    "tensor_subclass": "return plain torch.Tensor outputs that your kernel has fully written",
    "torch_compile": "write the kernel yourself (CUDA via load_inline, or Triton) and launch it from forward",
    "monkey_patch": "do not modify torch, time or other modules; the harness's functions must stay untouched",
    "identity_cache": "compute the output from the input values on every call; never key results on addresses or ids",
    "forward_state": "compute every output from the current inputs; forward must not write attributes or module state",
    "side_stream": "launch on the current stream: `at::cuda::getCurrentCUDAStream()` in C++, no new streams in Python",
    "torch_compute": "in strict mode the heavy work must run in your own __global__ kernel; keep PyTorch only for allocation and views",
    "precision_downgrade": "compute in fp32 (the task's dtype) unless the problem itself is fp16/bf16",
}


# --------------------------------------------------------------------------------------------------------------
# CUDA / C++


_SIDE_STREAM_PATTERNS = [
    (re.compile(r"\bcudaStreamCreate\w*"), "creates a CUDA stream; work on it escapes the timer"),
    (re.compile(r"\bcuStreamCreate\w*"), "creates a CUDA stream; work on it escapes the timer"),
    (re.compile(r"\bgetStreamFromPool\b"), "takes a side stream from the pool; work on it escapes the timer"),
    (re.compile(r"\bgetStreamFromExternal\b"), "wraps a foreign stream; work on it escapes the timer"),
    (re.compile(r"\bcudaStreamPerThread\b"), "uses the per-thread stream instead of the current stream"),
    (re.compile(r"\bsetCurrentCUDAStream\b"), "switches the current stream; work on it escapes the timer"),
    (re.compile(r"\bCUDAStreamGuard\b"), "switches to another stream; work on it escapes the timer"),
]
_LIBRARY_STREAM = re.compile(r"\b(cublasSetStream\w*|cudnnSetStream|cublasLtSetStream)\s*\(([^;]*);")
_HOST_THREAD_PATTERNS = [
    (re.compile(r"\bstd::(thread|jthread|async)\b"), "starts a host thread"),
    (re.compile(r"\bpthread_create\b"), "starts a host thread"),
    (re.compile(r"(?<![\w.:])(fork|vfork|popen|system)\s*\("), "starts a process"),
    (re.compile(r"\bcudaLaunchHostFunc\b|\bcudaStreamAddCallback\b|\bcuLaunchHostFunc\b"),
     "schedules host callbacks that run outside the timed region"),
]
_CUDA_GRAPH_PATTERN = re.compile(r"\b(cudaGraph\w*|cudaStreamBeginCapture\w*|cuGraph\w*)")
_LIBRARY_PATTERNS = [
    re.compile(r"\b(cublas(?!SetStream)\w*)\s*\("),
    re.compile(r"\b(cudnn(?!SetStream)\w*)\s*\("),
    re.compile(r"#\s*include\s*[<\"](cublas\w*\.h|cudnn\w*\.h|cutlass/gemm[\w/]*\.h)[>\"]"),
    re.compile(r"\b(cutlass::gemm::device::\w+)"),
    re.compile(r"\b(at::cuda::blas::\w+)"),
]
_PRECISION_PATTERN = re.compile(
    r"\b(__half2?|half2|__nv_bfloat16\w*|__float2half\w*|__half2float|__float2bfloat16\w*|__bfloat162float|"
    r"__floats2half2_rn|at::kHalf|at::kBFloat16|torch::kFloat16|torch::kHalf|torch::kBFloat16|c10::Half|"
    r"c10::BFloat16|at::Half|at::BFloat16|wmma::precision::tf32|__float_to_tf32|CUBLAS_TF32_TENSOR_OP_MATH|"
    r"CUBLAS_COMPUTE_32F_FAST_\w+)\b")
_HOST_COMPUTE = re.compile(r"\b(?:at|torch|c10)::(?:\w+::)*(\w+)\s*(?:<[^<>;()]*>)?\s*\(")
_HOST_COMPUTE_NAMESPACE = re.compile(r"\b(?:at|torch)::(native|nn|linalg|special|fft|_ops)::(\w+)")
_USING_ATEN = re.compile(r"\busing\s+namespace\s+(?:at|torch)\s*;")
_UNQUALIFIED_CALL = re.compile(r"(?<![\w.:>])(\w+)\s*\(")
_CPP_DYNAMIC_PATTERNS = [
    (re.compile(r"\b(?:py|pybind11)::(?:module_?::import|eval|exec|eval_file)\b|\bPy(?:Import|Run|Eval)_\w+|"
                r"\bPyObject_Call\w*"), "dynamic_code", "calls back into Python from C++ (e.g. to run torch ops)",
     "keep the C++ side to your kernel launches; do not import or call Python from it"),
    (re.compile(r"\b(?:dlopen|dlsym|LoadLibrary\w*|GetProcAddress)\b"), "native_library",
     "loads a native library at run time", "build kernels only through the extension's own sources"),
]
_METHOD_CALL = re.compile(r"\.\s*(\w+)\s*\(")
_LAUNCH = re.compile(r"\b(\w+)\s*(?:<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<(.*?)>>>", re.S)
_LAUNCH_API = re.compile(r"\b(?:cudaLaunchKernel\w*|cudaLaunchCooperativeKernel\w*|cuLaunchKernel\w*)\s*\(([^;]*);", re.S)
_STATIC_VARIABLE = re.compile(
    r"\bstatic\s+(?!const\b|constexpr\b|inline\b|__device__|__global__|__host__|__forceinline__|__inline__|void\b"
    r"|struct\b|class\b)((?:[\w:]+(?:\s*<[^;{}()]*>)?[\s*&]+)+)(\w+)\s*(?:=[^;]*|\{[^;]*\}|\[[^\]]*\])?\s*;")
_FILE_SCOPE_VARIABLE = re.compile(
    r"^[ \t]*(?:__device__\s+|__managed__\s+|extern\s+)*((?:[\w:]+(?:\s*<[^;{}()]*>)?[\s*&]+)+)(\w+)\s*(?:=[^;]*|\{[^;]*\}|\[[^\]]*\])?\s*;",
    re.M)
_PERSISTENT_TYPE = re.compile(r"Tensor|\*|std::(?:unordered_)?map|std::vector|std::deque|std::list|std::array|"
                              r"std::optional|std::shared_ptr|std::unique_ptr|DataPtr|__device__|__managed__")
_PYBIND_DEF = re.compile(r"\.def\(\s*\"(\w+)\"\s*,\s*(?:py::overload_cast<[^>]*>\()?\s*&?\s*([\w:]+)")
_TORCH_LIBRARY_IMPL = re.compile(r"\.impl\(\s*\"(\w+)\"\s*,\s*(?:TORCH_FN\()?\s*&?\s*([\w:]+)")


def _strip_comments(text: str) -> str:
    """Blank C/C++ comments and string literals (keeping newlines and length) so offsets still map to lines."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == "'" and i + 2 < n and (text[i + 2] == "'" or text[i + 1] == "\\"):
            j = text.find("'", i + 1 + (text[i + 1] == "\\"))
            i = (n if j < 0 else j) + 1
        else:
            i += 1
    return "".join(out)


def _blank_string_literals(text: str) -> str:
    return re.sub(r'"(?:[^"\\\n]|\\.)*"', lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', text)


def _matching(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index just after the bracket that closes the one at `start`; len(text) when unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


@dataclass
class _CppFunction:
    name: str
    qualifiers: str
    body_start: int
    body_end: int


def _cpp_functions(code: str) -> list[_CppFunction]:
    """Function definitions (`name(...) {`) with body spans; good enough for host/device attribution."""
    functions = []
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", code):
        name = match.group(1)
        if name in _CPP_KEYWORDS or name.isupper():
            continue
        close = _matching(code, match.end() - 1, "(", ")")
        rest = code[close:close + 200]
        head = re.match(r"\s*(?:const\s*|noexcept\s*|override\s*|->\s*[\w:<>,\s*&]+?\s*)*\{", rest)
        if not head:
            continue
        body_start = close + head.end() - 1
        body_end = _matching(code, body_start, "{", "}")
        line_start = code.rfind(";", 0, match.start())
        line_start = max(line_start, code.rfind("}", 0, match.start()), code.rfind("{", 0, match.start()))
        functions.append(_CppFunction(name, code[line_start + 1:match.start()], body_start, body_end))
    return functions


class _CudaScanner:
    """Token-level rules for CUDA/C++ source strings; also records kernels and the host functions that launch them."""

    def __init__(self, report: _Report, policy: str, fp32_task: bool) -> None:
        self.report = report
        self.strict = policy == "strict"
        self.fp32_task = fp32_task
        self.kernels: dict[str, int] = {}
        self.exported_host: dict[str, str] = {}
        self.host_bodies: dict[str, list[str]] = {}

    def scan(self, texts: Iterable[_CodeText]) -> None:
        texts = list(texts)
        stripped = [(t, _strip_comments(t.text)) for t in texts]
        for text, code in stripped:
            for match in GLOBAL_KERNEL.finditer(code):
                self.kernels.setdefault(match.group(1), text.line_of(match.start(), "__global__"))
        functions_by_text = []
        for text, code in stripped:
            no_strings = _blank_string_literals(code)
            functions = _cpp_functions(no_strings)
            functions_by_text.append((text, code, no_strings, functions))
            self._scan_text(text, code, no_strings, functions)
        self._resolve_exports(functions_by_text)

    def _at(self, text: _CodeText, match: re.Match, group: int = 0) -> int:
        return text.line_of(match.start(group), match.group(group))

    def _scan_text(self, text: _CodeText, code: str, no_strings: str, functions: list[_CppFunction]) -> None:
        report = self.report
        for pattern, why in _SIDE_STREAM_PATTERNS:
            for match in pattern.finditer(no_strings):
                report.error("side_stream", self._at(text, match), f"`{match.group(0)}` {why}", _FIXES["side_stream"])
        for match in _LIBRARY_STREAM.finditer(no_strings):
            if "getCurrentCUDAStream" not in match.group(2) and "getCurrentStream" not in match.group(2):
                report.error("side_stream", self._at(text, match, 1),
                             f"`{match.group(1)}` binds the library to a stream other than the current one",
                             "pass `at::cuda::getCurrentCUDAStream()`")
        for pattern, why in _HOST_THREAD_PATTERNS:
            for match in pattern.finditer(no_strings):
                report.error("host_thread", self._at(text, match), f"`{match.group(0).strip('( ')}` {why}",
                             _FIXES["concurrency"])
        for match in _CUDA_GRAPH_PATTERN.finditer(no_strings):
            report.error("cuda_graph", self._at(text, match), f"`{match.group(1)}` captures/replays CUDA graphs",
                         "launch your kernel directly on every call")
        self._scan_persistent_state(text, no_strings, functions)
        device_spans = [(f.body_start, f.body_end) for f in functions
                        if "__global__" in f.qualifiers or "__device__" in f.qualifiers]
        for match in _LAUNCH.finditer(no_strings):
            config = _split_top_level(match.group(2))
            if len(config) < 4 or config[3].strip() in {"0", "nullptr", "NULL", "0x0", "cudaStreamLegacy"}:
                report.flag("default_stream_launch", self._at(text, match, 1),
                            f"`{match.group(1)}<<<...>>>` launches on the legacy default stream",
                            "pass the current stream: `<<<grid, block, shmem, at::cuda::getCurrentCUDAStream()>>>`")
        for pattern in _LIBRARY_PATTERNS:
            for match in pattern.finditer(code):
                report.add("error" if self.strict else "flag", "library_call", self._at(text, match, 1),
                           f"uses the vendor library `{match.group(1)}` for the computation",
                           "write the GEMM/convolution as your own __global__ kernel" if self.strict
                           else "fine in the IDE, but strict mode (benchmarks) requires your own kernel")
        if self.fp32_task:
            for match in _PRECISION_PATTERN.finditer(no_strings):
                report.flag("precision_downgrade", self._at(text, match, 1),
                            f"`{match.group(1)}` computes an fp32 task in reduced precision",
                            _FIXES["precision_downgrade"])
        for pattern, code, what, fix in _CPP_DYNAMIC_PATTERNS:
            for match in pattern.finditer(no_strings):
                report.error(code, self._at(text, match), f"`{match.group(0)}` {what}", fix)
        if self.strict:
            self._scan_host_compute(text, no_strings, device_spans)

    def _scan_persistent_state(self, text: _CodeText, code: str, functions: list[_CppFunction]) -> None:
        for match in _STATIC_VARIABLE.finditer(code):
            declared_type = match.group(1)
            if _PERSISTENT_TYPE.search(declared_type):
                self.report.error(
                    "persistent_state", self._at(text, match),
                    f"`static {declared_type.strip()} {match.group(2)}` keeps a tensor/buffer alive between calls (a result cache)",
                    "allocate outputs per call (e.g. torch::empty_like) and compute them from the current inputs")
        bodies = [(f.body_start, f.body_end) for f in functions]
        namespace_depth = _brace_depth_outside_namespaces(code)
        for match in _FILE_SCOPE_VARIABLE.finditer(code):
            position = match.start(2)
            if any(start <= position < end for start, end in bodies) or namespace_depth(position) > 0:
                continue
            declared = match.group(0)
            declared_type = match.group(1)
            if re.search(r"\b(return|using|typedef|template|namespace|const|constexpr|__constant__|__shared__)\b", declared):
                continue
            if not _PERSISTENT_TYPE.search(declared_type + (" __device__" if "__device__" in declared or "__managed__" in declared else "")):
                continue
            severity = "flag" if ("__device__" in declared and "Tensor" not in declared_type) else "error"
            self.report.add(severity, "persistent_state", self._at(text, match, 2),
                            f"file-scope `{' '.join(declared.split())}` persists between calls (it can cache outputs)",
                            "keep buffers local to each call; pass outputs in as tensors")

    def _scan_host_compute(self, text: _CodeText, code: str, device_spans: list[tuple[int, int]]) -> None:
        for match in _HOST_COMPUTE_NAMESPACE.finditer(code):
            if match.group(1) == "nn" and match.group(2) in {"Module"}:
                continue
            self.report.error("host_compute", self._at(text, match),
                              f"host code calls the ATen/LibTorch routine `{match.group(0)}`",
                              "compute it in your own __global__ kernel (strict mode)")
        for match in _HOST_COMPUTE.finditer(code):
            if match.group(1) in _COMPUTE_OPS:
                self.report.error("host_compute", self._at(text, match),
                                  f"host code computes with `{match.group(0).rstrip('( ')}` instead of a kernel",
                                  "compute it in your own __global__ kernel (strict mode)")
        if _USING_ATEN.search(code):
            for match in _UNQUALIFIED_CALL.finditer(code):
                if match.group(1) in _ATEN_ONLY_OPS and not any(s <= match.start() < e for s, e in device_spans):
                    self.report.error("host_compute", self._at(text, match, 1),
                                      f"host code calls the ATen routine `{match.group(1)}` (via `using namespace`)",
                                      "compute it in your own __global__ kernel (strict mode)")
        for match in _METHOD_CALL.finditer(code):
            if match.group(1) in _COMPUTE_OPS and not any(start <= match.start() < end for start, end in device_spans):
                self.report.error("host_compute", self._at(text, match),
                                  f"host code computes with the tensor method `.{match.group(1)}()`",
                                  "compute it in your own __global__ kernel (strict mode)")

    def _resolve_exports(self, functions_by_text) -> None:
        """Which exported host functions launch a __global__ kernel (directly or through other host functions)."""
        all_code_with_strings = "\n".join(code for _, code, _, _ in functions_by_text)
        bodies: dict[str, list[str]] = {}
        for _, _, no_strings, functions in functions_by_text:
            for function in functions:
                bodies.setdefault(function.name, []).append(no_strings[function.body_start:function.body_end])
        exports: dict[str, str] = {}
        for match in _PYBIND_DEF.finditer(all_code_with_strings):
            exports[match.group(1)] = match.group(2).split("::")[-1]
        for match in _TORCH_LIBRARY_IMPL.finditer(all_code_with_strings):
            exports[match.group(1)] = match.group(2).split("::")[-1]
        self.exported_host = exports
        self.host_bodies = bodies

    def launches_kernel(self, function_name: str) -> bool:
        seen: set[str] = set()
        queue = [function_name]
        while queue:
            name = queue.pop()
            if name in seen:
                continue
            seen.add(name)
            for body in self.host_bodies.get(name, []):
                for match in _LAUNCH.finditer(body):
                    if match.group(1) in self.kernels:
                        return True
                for match in _LAUNCH_API.finditer(body):
                    if any(re.search(rf"\b{re.escape(k)}\b", match.group(1)) for k in self.kernels):
                        return True
                queue.extend(n for n in re.findall(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", body)
                             if n in self.host_bodies and n not in self.kernels)
        return False

    def finish_standalone(self) -> None:
        """For a bare .cu file in strict mode: it must at least define a kernel."""
        if self.strict and not self.kernels:
            self.report.error("no_custom_kernel", None, "the CUDA file defines no `__global__` kernel",
                              "define a __global__ kernel and launch it from the host function")


def _split_top_level(config: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in config:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _brace_depth_outside_namespaces(code: str):
    """Returns f(offset) -> number of enclosing non-namespace braces (0 = file/namespace scope)."""
    events: list[tuple[int, int]] = []
    stack: list[bool] = []
    depth = 0
    for match in re.finditer(r"[{}]", code):
        if match.group(0) == "{":
            before = code[max(0, match.start() - 80):match.start()]
            is_namespace = bool(re.search(r"(namespace\s*\w*|extern\s*\"C\")\s*$", before))
            stack.append(is_namespace)
            depth += 0 if is_namespace else 1
        elif stack:
            depth -= 0 if stack.pop() else 1
        events.append((match.start(), depth))

    def depth_at(offset: int) -> int:
        current = 0
        for position, value in events:
            if position >= offset:
                break
            current = value
        return current

    return depth_at
