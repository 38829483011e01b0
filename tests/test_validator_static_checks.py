"""Unit tests for each static anti-cheat rule (docs/validator.md#static-checks): one case that must fire, one that
must not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dice_copilot.validator.static_checks import FINDING_CODES, Finding, check_static, reference_uses_low_precision

# A minimal honest candidate; tests swap in pieces through the @MARKERS@.
TEMPLATE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
@PRELUDE@
cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
@CUDA_EXTRA@
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

torch::Tensor scale_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
@HOST_EXTRA@
    scale_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(
    name="scale",
    cpp_sources="torch::Tensor scale_forward(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["scale_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
@INIT@

    def forward(self, x):
@FORWARD@
'''

REFERENCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.rand(16, 16)]


def get_init_inputs():
    return []
'''


def candidate(forward="return ext.scale_forward(x)", init="pass", prelude="", cuda_extra="", host_extra="") -> str:
    return (TEMPLATE.replace("@PRELUDE@", textwrap.dedent(prelude))
            .replace("@CUDA_EXTRA@", textwrap.dedent(cuda_extra))
            .replace("@HOST_EXTRA@", textwrap.indent(textwrap.dedent(host_extra), "    "))
            .replace("@INIT@", textwrap.indent(textwrap.dedent(init), " " * 8))
            .replace("@FORWARD@", textwrap.indent(textwrap.dedent(forward), " " * 8)))


def errors(source: str, policy: str = "strict", reference: str | None = None) -> set[str]:
    return {f.code for f in check_static(source, policy, reference) if f.severity == "error"}


def flags(source: str, policy: str = "strict", reference: str | None = None) -> set[str]:
    return {f.code for f in check_static(source, policy, reference) if f.severity == "flag"}


def line_of(source: str, needle: str) -> int:
    return next(i for i, line in enumerate(source.replace("\r\n", "\n").split("\n"), 1) if needle in line)


# ---- the template itself and the API ----

@pytest.mark.parametrize("policy", ["strict", "ide"])
def test_honest_template_has_no_findings(policy):
    assert check_static(candidate(), policy, REFERENCE) == []


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="use one of ide, strict"):
        check_static(candidate(), "lenient")


def test_finding_fields_and_message_shape():
    source = candidate(forward="return torch.matmul(x, x)")
    finding = next(f for f in check_static(source, "strict") if f.code == "torch_compute")
    assert isinstance(finding, Finding)
    assert finding.severity == "error"
    assert finding.line == line_of(source, "torch.matmul")
    what, _, fix = finding.message.partition("; ")
    assert what.startswith(f"line {finding.line}: ") and "torch.matmul" in what
    assert fix.strip(), "every message says what to do"


def test_syntax_error_reports_the_line():
    findings = check_static("import torch\ndef broken(:\n    pass\n", "ide")
    assert [(f.code, f.line, f.severity) for f in findings] == [("syntax_error", 2, "error")]


# ---- try/except ----

def test_try_except_in_forward_is_rejected_in_both_policies():
    source = candidate(forward="""\
        try:
            return ext.scale_forward(x)
        except RuntimeError:
            return x * 2
        """)
    assert "try_except_fallback" in errors(source, "strict")
    assert "try_except_fallback" in errors(source, "ide")


def test_try_except_in_a_helper_forward_calls_is_rejected():
    source = candidate(prelude="""\
        def run(x):
            try:
                return ext.scale_forward(x)
            except Exception:
                return x
        """, forward="return run(x)")
    assert "try_except_fallback" in errors(source, "ide")


def test_module_level_try_is_error_in_strict_and_flag_in_ide():
    source = candidate(prelude="""\
        try:
            import triton
        except ImportError:
            triton = None
        """)
    assert "try_except_fallback" in errors(source, "strict")
    assert "try_except_fallback" in flags(source, "ide")
    assert "try_except_fallback" not in errors(source, "ide")


def test_try_finally_without_handlers_is_fine():
    source = candidate(forward="""\
        try:
            return ext.scale_forward(x)
        finally:
            pass
        """)
    assert "try_except_fallback" not in errors(source)


def test_contextlib_suppress_in_forward_is_rejected():
    source = candidate(prelude="import contextlib\n", forward="""\
        with contextlib.suppress(RuntimeError):
            return ext.scale_forward(x)
        return x * 2
        """)
    assert "try_except_fallback" in errors(source, "ide")


# ---- reference reuse ----

def test_subclassing_the_reference_is_rejected():
    source = REFERENCE + "\n\nclass ModelNew(Model):\n    pass\n"
    assert "reference_reuse" in errors(source, "ide")


def test_instantiating_the_reference_is_rejected():
    source = candidate(prelude="from reference_problem import Model\n", init="self.inner = Model()",
                       forward="return self.inner(x)")
    found = errors(source, "ide")
    assert "reference_reuse" in found


def test_reaching_the_reference_through_a_module_is_rejected():
    source = candidate(prelude="import reference_problem\n", forward="return reference_problem.Model()(x)")
    assert "reference_reuse" in errors(source, "ide")


def test_copied_reference_forward_is_rejected_when_reference_is_known():
    source = candidate(forward="return x * 2")
    assert "reference_reuse" in errors(source, "ide", REFERENCE)
    assert "reference_reuse" not in errors(source, "ide")


def test_own_helper_class_with_a_reference_class_name_is_allowed():
    reference = REFERENCE + "\n\nclass Block(nn.Module):\n    pass\n"
    source = candidate(prelude="""\
        class Block(nn.Module):
            def forward(self, x):
                return ext.scale_forward(x)
        """, init="self.block = Block()", forward="return self.block(x)")
    assert "reference_reuse" not in errors(source, "strict", reference)


def test_relative_import_is_rejected():
    source = candidate(prelude="from .problem import helper\n")
    assert "reference_reuse" in errors(source, "ide")


# ---- dynamic code, introspection, native libraries ----

@pytest.mark.parametrize("snippet", [
    "exec('y = 1')", "eval('1 + 1')", "compile('1', 'f', 'eval')", "__import__('os')",
])
def test_dynamic_code_builtins_are_rejected(snippet):
    assert "dynamic_code" in errors(candidate(prelude=snippet + "\n"), "ide")


def test_importlib_is_rejected():
    assert "dynamic_code" in errors(candidate(prelude="import importlib\n"), "ide")


def test_method_named_compile_is_not_dynamic_code():
    source = candidate(prelude="import re\nPATTERN = re.compile(r'\\d+')\n")
    assert errors(source, "strict") == set()


@pytest.mark.parametrize("prelude", [
    "import sys\nframe = sys._getframe(1)\n", "import gc\n", "namespace = globals()\n", "import inspect\n",
])
def test_harness_introspection_is_rejected(prelude):
    assert "harness_introspection" in errors(candidate(prelude=prelude), "ide")


@pytest.mark.parametrize("prelude", [
    "import ctypes\n", "from ctypes import CDLL\n", "import cffi\n", "torch.ops.load_library('libk.so')\n",
])
def test_native_libraries_are_rejected(prelude):
    assert "native_library" in errors(candidate(prelude=prelude), "ide")


# ---- concurrency ----

@pytest.mark.parametrize("prelude", [
    "import threading\n", "from concurrent.futures import ThreadPoolExecutor\n", "import multiprocessing\n",
    "import asyncio\n", "import subprocess\n", "import os\npid = os.fork()\n", "from os import system\n",
    "import torch.multiprocessing as mp\n",
])
def test_concurrency_is_rejected(prelude):
    assert "concurrency" in errors(candidate(prelude=prelude), "ide")


def test_os_path_use_is_not_concurrency():
    source = candidate(prelude="import os\nHERE = os.path.dirname(os.path.abspath(__file__))\n")
    assert errors(source, "strict") == set()


# ---- tensor subclasses and lazy results ----

@pytest.mark.parametrize("prelude", [
    "class Lazy(torch.Tensor):\n    pass\n",
    "from torch import Tensor\nclass Lazy(Tensor):\n    pass\n",
    "class Mode:\n    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n        return func(*args)\n",
    "def wrap(t):\n    return torch.Tensor._make_subclass(torch.Tensor, t)\n",
    "from torch.utils._python_dispatch import TorchDispatchMode\n",
])
def test_tensor_subclasses_are_rejected(prelude):
    assert "tensor_subclass" in errors(candidate(prelude=prelude), "ide")


def test_class_reassignment_is_rejected():
    source = candidate(forward="y = ext.scale_forward(x)\ny.__class__ = type(y)\nreturn y")
    assert "tensor_subclass" in errors(source, "ide")


# ---- monkey-patching and global state ----

@pytest.mark.parametrize("prelude", [
    "torch.cuda.synchronize = lambda: None\n",
    "import time\ntime.perf_counter = lambda: 0.0\n",
    "torch.backends.cudnn.allow_tf32 = True\n",
    "torch.testing.assert_close = lambda *a, **k: None\n",
    "setattr(torch, 'allclose', lambda *a, **k: True)\n",
    "torch.Tensor.__eq__ = lambda a, b: True\n",
])
def test_module_attribute_assignment_is_rejected(prelude):
    assert "monkey_patch" in errors(candidate(prelude=prelude), "ide")


def test_global_torch_settings_are_rejected():
    source = candidate(prelude="torch.set_float32_matmul_precision('high')\n")
    assert "global_state" in errors(source, "ide")


def test_environment_write_is_only_flagged():
    source = candidate(prelude="import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n")
    assert errors(source, "strict") == set()
    assert "environment_write" in flags(source, "strict")


def test_own_object_attributes_are_not_monkey_patching():
    source = candidate(init="self.scale = 2.0")
    assert errors(source, "strict") == set()


# ---- graphs and compilers ----

@pytest.mark.parametrize("code, rule", [
    ("graph = torch.cuda.CUDAGraph()\n", "cuda_graph"),
    ("fast = torch.compile(lambda x: x * 2)\n", "torch_compile"),
    ("scripted = torch.jit.script(lambda x: x * 2)\n", "torch_compile"),
])
def test_graphs_and_compilers_are_rejected(code, rule):
    assert rule in errors(candidate(prelude=code), "ide")


def test_cuda_graph_api_in_cuda_source_is_rejected():
    source = candidate(host_extra="cudaGraph_t graph;\ncudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal);")
    assert "cuda_graph" in errors(source, "ide")


# ---- identity caches and state kept by forward ----

@pytest.mark.parametrize("forward", [
    "key = x.data_ptr()\nreturn ext.scale_forward(x)",
    "key = id(x)\nreturn ext.scale_forward(x)",
    "key = x._version\nreturn ext.scale_forward(x)",
])
def test_identity_reads_are_rejected(forward):
    assert "identity_cache" in errors(candidate(forward=forward), "ide")


@pytest.mark.parametrize("prelude, init, forward", [
    ("CACHE = {}\n", "pass", "y = ext.scale_forward(x)\nCACHE[x.shape] = y\nreturn y"),
    ("CACHE = []\n", "pass", "y = ext.scale_forward(x)\nCACHE.append(y)\nreturn y"),
    ("", "self.last = None", "self.last = ext.scale_forward(x)\nreturn self.last"),
    ("", "self.seen = {}", "y = ext.scale_forward(x)\nself.seen.update({1: y})\nreturn y"),
    ("", "self.calls = 0", "self.calls += 1\nreturn ext.scale_forward(x)"),
    ("COUNT = 0\n", "pass", "global COUNT\nCOUNT += 1\nreturn ext.scale_forward(x)"),
    ("", "self.buf = torch.zeros(4)", "self.buf.copy_(x[:4])\nreturn ext.scale_forward(x)"),
    ("", "pass", "ModelNew.shared = x\nreturn ext.scale_forward(x)"),
])
def test_state_written_by_forward_is_rejected(prelude, init, forward):
    assert "forward_state" in errors(candidate(prelude=prelude, init=init, forward=forward), "ide")


def test_memoized_helpers_are_rejected():
    source = candidate(prelude="import functools\n\n@functools.lru_cache(maxsize=None)\ndef plan(n):\n    return n\n")
    assert "forward_state" in errors(source, "ide")


def test_mutable_default_argument_in_forward_path_is_rejected():
    source = candidate(prelude="def run(x, _cache={}):\n    return ext.scale_forward(x)\n", forward="return run(x)")
    assert "forward_state" in errors(source, "ide")


def test_local_containers_and_init_state_are_fine():
    source = candidate(prelude="SIZES = {'block': 256}\n", init="self.results = {}\nself.block = SIZES['block']",
                       forward="parts = []\nparts.append(ext.scale_forward(x))\nreturn parts[0]")
    assert "forward_state" not in errors(source, "ide")


# ---- file I/O ----

@pytest.mark.parametrize("prelude, forward", [
    ("DATA = open('expected.bin', 'rb').read()\n", "return ext.scale_forward(x)"),
    ("", "torch.save(x, 'x.pt')\nreturn ext.scale_forward(x)"),
    ("", "with open('log.txt', 'a') as f:\n    f.write('x')\nreturn ext.scale_forward(x)"),
    ("from pathlib import Path\n", "Path('out.txt').write_text('x')\nreturn ext.scale_forward(x)"),
    ("import pickle\n", "return ext.scale_forward(x)"),
])
def test_file_io_is_rejected(prelude, forward):
    assert "file_io" in errors(candidate(prelude=prelude, forward=forward), "ide")


@pytest.mark.parametrize("prelude", [
    "import os\nKERNEL = open(os.path.join(os.path.dirname(__file__), 'scale.cu')).read()\n",
    "from pathlib import Path\nKERNEL = Path(__file__).with_name('scale.cu').read_text()\n",
    "SOURCE_PATH = 'kernels/scale.cuh'\nKERNEL = open(SOURCE_PATH).read()\n",
])
def test_reading_kernel_sources_at_import_is_allowed(prelude):
    assert "file_io" not in errors(candidate(prelude=prelude), "strict")


def test_string_replace_is_not_file_io():
    source = candidate(prelude="SRC = 'a'.replace('a', 'b')\n")
    assert "file_io" not in errors(source, "strict")


# ---- CUDA/C++ scans ----

@pytest.mark.parametrize("host", [
    "cudaStream_t s;\ncudaStreamCreate(&s);",
    "auto s = at::cuda::getStreamFromPool();",
    "cudaStream_t s = cudaStreamPerThread;",
    "cublasSetStream(handle, side);",
])
def test_side_streams_in_cuda_are_rejected(host):
    assert "side_stream" in errors(candidate(host_extra=host), "ide")


def test_library_stream_bound_to_the_current_stream_is_not_a_side_stream():
    source = candidate(host_extra="cublasSetStream(handle, at::cuda::getCurrentCUDAStream());")
    assert "side_stream" not in errors(source, "ide")


@pytest.mark.parametrize("host", [
    "std::thread worker([]{});\nworker.detach();", "pthread_create(&t, nullptr, run, nullptr);", "fork();",
    "cudaLaunchHostFunc(0, callback, nullptr);",
])
def test_host_threads_in_cuda_are_rejected(host):
    assert "host_thread" in errors(candidate(host_extra=host), "ide")


def test_forbidden_names_inside_comments_are_ignored():
    source = candidate(host_extra="// never call cudaStreamCreate or std::thread here\n/* fork() */")
    assert check_static(source, "strict") == []


@pytest.mark.parametrize("cuda_extra, host, severity", [
    ("", "static torch::Tensor cached;", "error"),
    ("", "static std::unordered_map<int64_t, torch::Tensor> cache;", "error"),
    ("", "static float* scratch = nullptr;", "error"),
    ("torch::Tensor g_last_output;", "", "error"),
    ("__device__ float g_partial[1024];", "", "flag"),
])
def test_persistent_host_and_device_state(cuda_extra, host, severity):
    found = {(f.code, f.severity) for f in check_static(candidate(cuda_extra=cuda_extra, host_extra=host), "ide")}
    assert ("persistent_state", severity) in found


@pytest.mark.parametrize("cuda_extra, host", [
    ("constexpr int kBlock = 256;", "static const int kWarps = 8;"),
    ("__constant__ float c_weights[64];", "static int device_count = 0;"),
    ("namespace {\nconstexpr int kTile = 32;\n}", ""),
])
def test_constants_and_scalars_are_not_persistent_state(cuda_extra, host):
    assert "persistent_state" not in {f.code for f in check_static(candidate(cuda_extra=cuda_extra, host_extra=host), "ide")}


def test_implicit_default_stream_launch_is_flagged_on_its_line():
    source = candidate().replace(", 0, at::cuda::getCurrentCUDAStream()>>>", ">>>")
    findings = [f for f in check_static(source, "strict") if f.code == "default_stream_launch"]
    assert [(f.severity, f.line) for f in findings] == [("flag", line_of(source, "scale_kernel<<<"))]


def test_cuda_findings_carry_python_file_lines():
    source = candidate(host_extra="cudaStream_t s;\ncudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);")
    finding = next(f for f in check_static(source, "ide") if f.code == "side_stream")
    assert finding.line == line_of(source, "cudaStreamCreateWithFlags")


def test_cuda_lines_map_through_concatenated_strings():
    source = candidate().replace('cpp_sources="torch::Tensor scale_forward(torch::Tensor x);",', (
        'cpp_sources=("torch::Tensor scale_forward(torch::Tensor x);\\n"\n'
        '                 "void spawn() { std::thread t; }\\n"),'))
    finding = next(f for f in check_static(source, "ide") if f.code == "host_thread")
    assert finding.line == line_of(source, "std::thread")


def test_standalone_cuda_file_is_scanned_with_its_own_lines():
    cu = "#include <cuda_runtime.h>\n\n__global__ void k(float* y) { y[0] = 1.0f; }\n\nvoid go() {\n  cudaStream_t s;\n  cudaStreamCreate(&s);\n}\n"
    finding = next(f for f in check_static(cu, "strict") if f.code == "side_stream")
    assert finding.line == 7


def test_standalone_cuda_file_without_kernel_is_rejected_in_strict():
    assert "no_custom_kernel" in errors("#include <cuda_runtime.h>\nvoid go() {}\n", "strict")


# ---- strict: the custom kernel must do the work ----

def test_no_kernel_is_rejected_only_in_strict():
    source = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.view(-1)\n"
    assert "no_custom_kernel" in errors(source, "strict")
    assert errors(source, "ide") == set()


def test_kernels_built_from_cu_files_are_checked_in_those_files():
    loader = ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load\n\n"
              "ext = load(name='scale', sources=['scale.cu'])\n\n"
              "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.scale_forward(x)\n")
    assert errors(loader, "strict") == set()
    assert "kernel_not_invoked" in errors(loader.replace("return ext.scale_forward(x)", "return x.view(-1)"), "strict")


@pytest.mark.parametrize("policy", ["ide", "strict"])
@pytest.mark.parametrize("source", ["", "\n\n", "import torch\n", "class Net(torch.nn.Module):\n    pass\n",
                                    "if True:\n    class ModelNew:\n        pass\n"])
def test_missing_model_new_is_rejected_in_both_policies(source, policy):
    (finding,) = [f for f in check_static(source, policy) if f.severity == "error"]
    assert finding.code == "no_model_new" and finding.message.startswith("no class ModelNew")
    assert "must define `class ModelNew(nn.Module)`" in finding.message
    assert ("empty" in finding.message) == (not source.strip())


def test_a_cu_file_of_preprocessor_lines_is_not_read_as_python():
    # Python would parse it (every line a comment) and find no ModelNew; as CUDA there is nothing to reject.
    header_only = "#include <cuda_runtime.h>\n#define N 4\n"
    assert check_static(header_only, "ide", cuda_file=True) == []
    assert errors(header_only, "ide") == {"no_model_new"}  # the same text as a Python module


def test_kernel_never_called_from_forward_is_rejected():
    assert "kernel_not_invoked" in errors(candidate(forward="return x.contiguous()"), "strict")


def test_exported_function_that_launches_nothing_is_rejected():
    source = candidate().replace("torch::Tensor scale_forward(torch::Tensor x) {", (
        "torch::Tensor noop_forward(torch::Tensor x) { return x.contiguous(); }\n\n"
        "torch::Tensor scale_forward(torch::Tensor x) {")).replace(
        'functions=["scale_forward"]', 'functions=["scale_forward", "noop_forward"]').replace(
        'cpp_sources="torch::Tensor scale_forward(torch::Tensor x);"',
        'cpp_sources="torch::Tensor scale_forward(torch::Tensor x); torch::Tensor noop_forward(torch::Tensor x);"')
    assert "kernel_not_invoked" in errors(source.replace("return ext.scale_forward(x)", "return ext.noop_forward(x)"))
    assert "kernel_not_invoked" not in errors(source)


def test_kernel_launched_through_a_host_helper_counts():
    source = candidate().replace(
        "torch::Tensor scale_forward(torch::Tensor x) {",
        "void launch(const float* x, float* y, int64_t n) {\n"
        "    scale_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x, y, n);\n}\n\n"
        "torch::Tensor scale_forward(torch::Tensor x) {").replace(
        "    scale_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "    launch(x.data_ptr<float>(), y.data_ptr<float>(), n);")
    assert errors(source) == set()


TRITON_CANDIDATE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def scale(x):
    y = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        return @CALL@
'''


def test_triton_kernel_launched_from_forward_passes_strict():
    assert check_static(TRITON_CANDIDATE.replace("@CALL@", "scale(x)"), "strict") == []


def test_triton_kernel_never_launched_is_rejected():
    assert "kernel_not_invoked" in errors(TRITON_CANDIDATE.replace("@CALL@", "x.contiguous()"), "strict")


@pytest.mark.parametrize("prelude, init, forward", [
    ("", "pass", "return torch.matmul(x, x)"),
    ("import torch.nn.functional as F\n", "pass", "return F.gelu(ext.scale_forward(x))"),
    ("", "pass", "return ext.scale_forward(x).sum()"),
    ("", "pass", "return ext.scale_forward(x) @ x"),
    ("", "self.proj = nn.Linear(16, 16)", "return self.proj(ext.scale_forward(x))"),
    ("", "self.layers = nn.ModuleList([nn.Conv2d(3, 3, 1)])", "return self.layers[0](ext.scale_forward(x))"),
    ("mm = getattr(torch, 'mm')\n", "pass", "return mm(x, x)"),
    ("import numpy as np\n", "pass", "return torch.from_numpy(np.maximum(x.cpu().numpy(), 0))"),
])
def test_torch_compute_in_forward_is_rejected_only_in_strict(prelude, init, forward):
    source = candidate(prelude=prelude, init=init, forward=forward)
    assert "torch_compute" in errors(source, "strict")
    assert "torch_compute" not in errors(source, "ide")


def test_allocation_view_and_weight_holders_are_allowed_in_strict():
    source = candidate(init="self.proj = nn.Linear(16, 16)\nnn.init.zeros_(self.proj.bias)", forward="""\
        flat = x.contiguous().view(-1, x.size(-1))
        out = torch.empty_like(flat)
        w = self.proj.weight.t().contiguous()
        return ext.scale_forward(flat).reshape(x.shape)
        """)
    assert errors(source, "strict") == set()


def test_dynamic_torch_attribute_is_rejected_in_strict():
    source = candidate(forward="op = 'relu'\nreturn getattr(torch, op)(ext.scale_forward(x))")
    assert "dynamic_attribute" in errors(source, "strict")


@pytest.mark.parametrize("host", [
    "auto z = torch::matmul(x, x);", "auto z = at::softmax(x, 1);", "auto z = x.sum();",
    "auto z = at::native::relu(x);", "auto z = torch::nn::functional::gelu(x);",
])
def test_aten_compute_in_host_code_is_rejected_only_in_strict(host):
    source = candidate(host_extra=host)
    assert "host_compute" in errors(source, "strict")
    assert "host_compute" not in errors(source, "ide")


def test_device_code_method_names_are_not_host_compute():
    source = candidate(cuda_extra="struct Acc { float v; __device__ float sum(float o) const { return v + o; } };\n"
                                  "__device__ float combine(Acc a) { return a.sum(1.0f); }")
    assert "host_compute" not in errors(source, "strict")


def test_vendor_gemm_is_error_in_strict_and_flag_in_ide():
    source = candidate(cuda_extra="#include <cublas_v2.h>",
                       host_extra="cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &a, p, 1, p, 1, &b, q, 1);")
    assert "library_call" in errors(source, "strict")
    assert "library_call" in flags(source, "ide") and "library_call" not in errors(source, "ide")


def test_unknown_imports_are_rejected_only_in_strict():
    source = candidate(prelude="import problem_helpers\n")
    assert "unsupported_import" in errors(source, "strict")
    assert "unsupported_import" not in errors(source, "ide")


# ---- flags ----

@pytest.mark.parametrize("kwargs", [
    {"forward": "return ext.scale_forward(x.half()).float()"},
    {"forward": "return ext.scale_forward(x.to(torch.bfloat16))"},
    {"cuda_extra": "#include <cuda_fp16.h>\n__device__ __half to_half(float v) { return __float2half(v); }"},
])
def test_reduced_precision_in_an_fp32_task_is_flagged(kwargs):
    source = candidate(**kwargs)
    assert "precision_downgrade" in flags(source, "strict", REFERENCE)


def test_reduced_precision_is_not_flagged_for_a_half_precision_task():
    reference = REFERENCE.replace("torch.rand(16, 16)", "torch.rand(16, 16, dtype=torch.float16)")
    source = candidate(forward="return ext.scale_forward(x.half())")
    assert "precision_downgrade" not in flags(source, "strict", reference)


def test_a_name_or_a_docstring_saying_half_leaves_an_fp32_task_fp32():
    reference = REFERENCE.replace("    def forward(self, x):\n        return x * 2", '''    def forward(self, x):
        """Rotate half of the features (as rotary embeddings do)."""
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)''')
    assert "half" in reference and not reference_uses_low_precision(reference)
    source = candidate(forward="return ext.scale_forward(x.half()).float()")
    assert "precision_downgrade" in flags(source, "strict", reference)


@pytest.mark.parametrize("spelling", ["x.half()", "x.to(torch.bfloat16)", 'x.to(dtype="float16")',
                                      "x.to(torch.float8_e4m3fn)"])
def test_a_reference_computing_in_low_precision_is_read_so(spelling):
    reference = REFERENCE.replace("return x * 2", f"return ({spelling} * 2).float()")
    assert reference_uses_low_precision(reference)


def test_fast_math_is_flagged():
    source = candidate().replace('functions=["scale_forward"],', 'functions=["scale_forward"],\n    extra_cuda_cflags=["--use_fast_math"],')
    assert "fast_math" in flags(source, "strict")
    assert errors(source, "strict") == set()


def test_every_code_emitted_by_the_suite_is_documented():
    sources = [p.read_text() for p in (Path(__file__).parent / "cheats").glob("*.py")]
    sources += [candidate(host_extra="static float* s = nullptr;\nstd::thread t;"), TRITON_CANDIDATE, "x = (", "import torch\n"]
    codes = {f.code for source in sources for policy in ("ide", "strict") for f in check_static(source, policy)}
    assert codes <= set(FINDING_CODES), codes - set(FINDING_CODES)


# ---- evasions of the rules above (each once slipped through a simpler checker) ----

@pytest.mark.parametrize("kwargs, rule", [
    ({"forward": "return ext.scale_forward(x).__matmul__(x)"}, "torch_compute"),
    ({"forward": "y = ext.scale_forward(x)\ny @= x\nreturn y"}, "torch_compute"),
    ({"prelude": "import operator\n", "forward": "return operator.matmul(ext.scale_forward(x), x)"}, "torch_compute"),
    ({"prelude": "import functools\n", "forward": "return functools.reduce(torch.add, [ext.scale_forward(x), x])"},
     "torch_compute"),
    ({"prelude": "op = lambda a: a @ a\n", "forward": "return op(ext.scale_forward(x))"}, "torch_compute"),
    ({"prelude": "import functools\nop = functools.partial(torch.matmul)\n", "forward": "return op(ext.scale_forward(x), x)"},
     "torch_compute"),
    ({"forward": "return torch._C._TensorBase.matmul(ext.scale_forward(x), x)"}, "torch_compute"),
    ({"prelude": "from torch import *\n"}, "unsupported_import"),
    ({"host_extra": "auto z = at::cuda::mm(x, x);"}, "host_compute"),
    ({"host_extra": "auto z = at::_ops::mm::call(x, x);"}, "host_compute"),
    ({"cuda_extra": "using namespace at;", "host_extra": "auto z = mm(x, x);"}, "host_compute"),
])
def test_strict_evasions_are_caught(kwargs, rule):
    assert rule in errors(candidate(**kwargs), "strict")


@pytest.mark.parametrize("kwargs, rule", [
    ({"host_extra": 'auto mm = py::module::import("torch").attr("matmul");'}, "dynamic_code"),
    ({"host_extra": 'void* lib = dlopen("libcublas.so", RTLD_NOW);'}, "native_library"),
    ({"prelude": "def helper():\n    pass\n", "forward": "helper.cache = x\nreturn ext.scale_forward(x)"}, "forward_state"),
    ({"forward": "object.__setattr__(self, 'last', x)\nreturn ext.scale_forward(x)"}, "forward_state"),
    ({"prelude": "runner = __builtins__['eval']\n"}, "harness_introspection"),
    ({"prelude": "Lazy = type('Lazy', (torch.Tensor,), {})\n"}, "tensor_subclass"),
    ({"prelude": "object.__setattr__(torch, 'allclose', lambda *a, **k: True)\n"}, "monkey_patch"),
])
def test_evasions_are_caught_in_both_policies(kwargs, rule):
    assert rule in errors(candidate(**kwargs), "ide")
    assert rule in errors(candidate(**kwargs), "strict")


def test_dtype_and_namespace_references_are_not_compute():
    source = candidate(prelude="nn_namespace = torch.nn\n", forward="""\
        out = ext.scale_forward(x.to(torch.float32))
        return out.view(torch.Size([out.numel()])).view_as(x)
        """)
    assert errors(source, "strict") == set()


STYLES = sorted((Path(__file__).parent / "cheats" / "styles").glob("*.py"))


@pytest.mark.parametrize("path", STYLES, ids=[p.stem for p in STYLES])
def test_honest_candidate_styles_have_no_errors(path):
    """Load_inline with attribute holders, weight-holder layers, CuPy, NVRTC and Triton are all legitimate."""
    for policy in ("strict", "ide"):
        assert [f for f in check_static(path.read_text(), policy) if f.severity == "error"] == []


def test_lines_stay_right_after_form_feeds_and_crlf():
    source = candidate(prelude="\x0c\n", host_extra="cudaStream_t s;\ncudaStreamCreate(&s);").replace("\n", "\r\n")
    finding = next(f for f in check_static(source, "ide") if f.code == "side_stream")
    assert finding.line == line_of(source, "cudaStreamCreate(")


def test_a_file_holding_both_the_reference_and_model_new_is_not_a_reference_copy():
    """The editor case: Model and ModelNew side by side in one file, validated against that same file."""
    source = (Path(__file__).parents[1] / "examples" / "inline_bias_relu.py").read_text()
    for policy in ("ide", "strict"):
        errors = [f for f in check_static(source, policy, reference_source=source) if f.severity == "error"]
        assert errors == [], errors
