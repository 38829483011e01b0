"""Document context of the language server: kernel bodies, CUDA strings in Python, prefix/suffix, reference lookup,
nn.Module classes, UTF-16 positions, settings merging and the suggestion cache."""

import time

import pytest

from dice_copilot.server.cache import CachedSuggestion, CacheEntry, SuggestionCache, context_key
from dice_copilot.server.context import (LineIndex, defines_get_inputs, document_kind, find_cuda_strings,
                                         find_module_classes, find_reference, infill_window, kernel_at,
                                         new_kernel_path, offset_to_position, position_to_offset, scan_cuda,
                                         scan_python_strings)
from dice_copilot.server.settings import ServerSettings, merge_settings

CU = """// __global__ void commented_out() { }
#include <cuda_runtime.h>
/* __global__ void in_block_comment() { } */
__device__ __forceinline__ float square(float x) { return x * x; }
__device__ float table[4] = {1, 2, 3, 4};
__global__ void __launch_bounds__(256) scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // a } in a comment
    const char* s = "a } in a string";
    char c = '}';
    if (i < n) { y[i] = square(x[i]); }
    BODY_END
}
template <typename T>
__global__ void unfinished(T* out) {
    out[0] = 1;
"""


def at(text: str, marker: str, delta: int = 0) -> int:
    return text.index(marker) + delta


def test_cuda_scan_finds_bodies_and_ignores_comments_strings_and_variables():
    kernels = scan_cuda(CU).kernels
    assert [(k.name, k.qualifier, k.closed) for k in kernels] == [
        ("square", "__device__", True), ("scale", "__global__", True), ("unfinished", "__global__", False)]
    scale = kernels[1]
    assert CU[scale.body_end] == "}" and CU[scale.body_end - 12:scale.body_end].strip() == "BODY_END"
    assert kernels[2].body_end == len(CU)


@pytest.mark.parametrize("marker,delta,expected", [
    ("if (i < n)", 0, "scale"),
    ("BODY_END", 0, "scale"),
    ("return x * x", 0, "square"),
    ("out[0]", 0, "unfinished"),
    ("#include", 0, None),
    ("commented_out() {", 19, None),  # inside the // comment's braces
    ("in_block_comment() {", 21, None),
    ("a } in a comment", 2, None),  # inside a comment within the body
    ("a } in a string", 2, None),  # inside a string literal within the body
    ("{1, 2", 1, None),  # a __device__ variable initialiser is not a body
    ("template", 0, None),
])
def test_kernel_at_cuda(marker, delta, expected):
    found = kernel_at(CU, at(CU, marker, delta), "cuda")
    assert (found.kernel_name if found else None) == expected


def test_cursor_just_inside_braces_counts_and_just_outside_does_not():
    text = "__global__ void k(int* x) {}\n"
    brace = text.index("{")
    assert kernel_at(text, brace + 1, "cuda").kernel_name == "k"  # between { and }
    assert kernel_at(text, brace, "cuda") is None  # before the {
    assert kernel_at(text, brace + 2, "cuda") is None  # after the }


PY = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

doc = """A docstring that mentions cuda_sources but is prose."""

relu_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    RELU_BODY
}
torch::Tensor relu(torch::Tensor x) { return x; }
"""

cpp_source = "torch::Tensor relu(torch::Tensor x);"

direct = load_inline(name="direct", cpp_sources=cpp_source, cuda_sources=["""
__global__ void direct_kernel(float* y) {
    DIRECT_BODY
}
"""], functions=["relu"])

relu = load_inline("relu", cpp_source, relu_source, functions=["relu"])

unrelated = """
int not_cuda() { return 1; }
"""


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        text = """class Fake(nn.Module):"""
        return torch.relu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu(x)


def get_inputs():
    return [torch.randn(16)]
'''


def test_python_cuda_strings_by_variable_keyword_and_positional():
    strings = find_cuda_strings(PY)
    contents = [PY[s.content_start:s.content_end] for s in strings]
    assert len(strings) == 2
    assert "relu_kernel" in contents[0] and "direct_kernel" in contents[1]
    assert kernel_at(PY, at(PY, "RELU_BODY"), "python").kernel_name == "relu_kernel"
    assert kernel_at(PY, at(PY, "DIRECT_BODY"), "python").kernel_name == "direct_kernel"
    assert kernel_at(PY, at(PY, "return 1"), "python") is None
    assert kernel_at(PY, at(PY, "return torch.relu"), "python") is None


def test_heuristic_string_with_global_before_load_inline_is_written():
    text = 'import torch\nsrc = """\n__global__ void k(float* x) {\n    HERE\n}\n"""\n'
    assert kernel_at(text, at(text, "HERE"), "python").kernel_name == "k"


def test_python_strings_survive_unterminated_literals_and_comments():
    text = 'x = "a # not a comment"  # """ not a string\ny = """open\n__global__ void k() {\n  X'
    strings = scan_python_strings(text)
    assert [s.triple for s in strings] == [False, True]
    assert strings[1].closed is False and strings[1].content_end == len(text)
    assert kernel_at(text, len(text), "python").kernel_name == "k"


def test_module_classes_spans_and_skips_generated_and_strings():
    classes = find_module_classes(PY)
    assert [c.name for c in classes] == ["Model"]
    model = classes[0]
    assert PY[model.start:].startswith("class Model") and "return torch.relu(x)" in PY[model.start:model.end]
    assert "ModelNew" not in PY[model.start:model.end]
    assert [c.name for c in find_module_classes(PY, include_generated=True)] == ["Model", "ModelNew"]
    assert find_module_classes("class Plain(object):\n    pass\n") == []
    assert [c.name for c in find_module_classes("class A(torch.nn.Module):\n  pass\n")] == ["A"]


def test_reference_same_file_sibling_and_configured(tmp_path):
    assert find_reference(None, PY, "python").class_name == "Model"
    reference_text = "import torch.nn as nn\nclass Scale(nn.Module):\n    pass\ndef get_inputs():\n    return []\n"
    (tmp_path / "scale.py").write_text(reference_text)
    kernel = tmp_path / "scale.cu"
    found = find_reference(str(kernel), "__global__ void k() {}", "cuda")
    assert found.path == str(tmp_path / "scale.py") and found.class_name == "Scale"
    generated = tmp_path / "scale_kernel_2.py"
    assert find_reference(str(generated), "class ModelNew(nn.Module): pass", "python").path.endswith("scale.py")
    other = tmp_path / "elsewhere" / "ref.py"
    other.parent.mkdir()
    other.write_text(reference_text.replace("Scale", "Model"))
    configured = find_reference(str(kernel), "", "cuda", configured_path="elsewhere/ref.py")
    assert configured.path == str(other) and configured.class_name == "Model"
    assert find_reference(str(tmp_path / "lonely" / "k.cu"), "", "cuda") is None
    assert not defines_get_inputs("def get_inputs_later():\n    pass\n")


def test_new_kernel_path_never_reuses_existing_files(tmp_path):
    source = tmp_path / "layer.py"
    assert new_kernel_path(source).name == "layer_kernel.py"
    (tmp_path / "layer_kernel.py").write_text("x")
    (tmp_path / "layer_kernel_2.py").write_text("x")
    assert new_kernel_path(source).name == "layer_kernel_3.py"
    assert new_kernel_path(tmp_path / "layer_kernel_2.py").name == "layer_kernel_3.py"


def test_infill_window_cuts_at_line_boundaries():
    text = "".join(f"line {i}\n" for i in range(1000))
    offset = text.index("line 500")
    window = infill_window(text, offset, max_prefix_chars=100, max_suffix_chars=50)
    assert window.prefix + window.suffix == text[window.prefix_start:window.suffix_end]
    assert window.prefix.startswith("line") and len(window.prefix) <= 100
    assert window.suffix.endswith("\n") and len(window.suffix) <= 50
    whole = infill_window("ab", 5)
    assert (whole.prefix, whole.suffix) == ("ab", "")


def test_positions_utf16_surrogates_crlf_and_out_of_range():
    text = "a😀b\r\nxy\rz"
    assert position_to_offset(text, 0, 3) == 2  # 😀 is two UTF-16 units
    assert position_to_offset(text, 0, 2) == 1  # inside the surrogate pair: before the emoji
    assert position_to_offset(text, 0, 99) == 3  # past the line end: the line end
    assert position_to_offset(text, 1, 1) == 6 and position_to_offset(text, 2, 0) == 8
    assert position_to_offset(text, 99, 0) == len(text) and position_to_offset(text, -1, -5) == 0
    assert position_to_offset(text, 0, 5, "utf-8") == 2 and position_to_offset(text, 0, 2, "utf-32") == 2
    assert offset_to_position(text, 2) == (0, 3) and offset_to_position(text, 4) == (0, 4)
    assert offset_to_position(text, 10_000) == (2, 1)
    lone = "x\udcffy"  # a lone surrogate, as a non-UTF-8 byte decodes with surrogateescape
    assert LineIndex(lone).offset(0, 2, "utf-8") == 1 and LineIndex(lone).position(3, "utf-8") == (0, 5)


def test_document_kind():
    assert document_kind("file:///a/k.cu") == "cuda" and document_kind("file:///a/k.CUH") == "cuda"
    assert document_kind("file:///a/m.py") == "python"
    assert document_kind("untitled:1", "cuda-cpp") == "cuda"
    assert document_kind("file:///a/readme.md", "markdown") is None


def test_settings_merge_validates_each_key():
    merged, errors = merge_settings(ServerSettings(), {"diceCopilot": {
        "autoBudgetMs": 300, "strategy": "bogus", "validation": {"atol": 0.5, "policy": "strict"},
        "nvcc": {"flags": ["-O3"], "arch": "sm_80"}, "maxCandidates": 0, "unknownKey": 1, "autoTrigger": "yes"}})
    assert merged.autoBudgetMs == 300 and merged.strategy is None  # kept: unset
    assert merged.validation.atol == 0.5 and merged.validation.policy == "strict"
    assert merged.nvcc.flags == ("-O3",) and merged.nvcc.arch == "sm_80"
    assert merged.maxCandidates == ServerSettings().maxCandidates and merged.autoTrigger is True
    assert len(errors) == 3 and any("strategy" in e for e in errors) and any("autoTrigger" in e for e in errors)
    assert merge_settings(ServerSettings(), "nonsense")[1]


def test_cache_lru_ttl_and_type_through():
    cache = SuggestionCache(capacity=2, ttl_s=60)
    suggestion = CachedSuggestion("s1", "int j = i * 2;\n", {"passed": True})
    entry = CacheEntry("u", "pre", "suf", "p", (suggestion,), "ok", time.monotonic())
    key = context_key("u", "pre", "suf", "p")
    cache.put(key, entry)
    assert cache.get(key) is entry
    assert [s.text for s in cache.type_through("u", "preint j", "suf", "p")] == [" = i * 2;\n"]
    assert cache.type_through("u", "preint k", "suf", "p") == []
    assert cache.type_through("u", "preint j", "other suffix", "p") == []
    cache.put("k2", entry)
    cache.put("k3", entry)
    assert cache.get(key) is None and len(cache) == 2  # evicted, bounded
    stale = SuggestionCache(ttl_s=0.0)
    stale.put(key, CacheEntry("u", "pre", "suf", "p", (suggestion,), "ok", time.monotonic() - 1))
    assert stale.get(key) is None


def test_telemetry_is_off_by_default_and_writes_jsonl_when_enabled(tmp_path):
    import json

    from dice_copilot.server.telemetry import TelemetryLog

    log = TelemetryLog()
    target = tmp_path / "t" / "events.jsonl"
    log.configure(False, str(target))
    assert log.record("shown", id="a") is None and not target.exists()
    log.configure(True, str(target))
    log.record("shown", id="a", verdict={"passed": True})
    log.record("accepted", id="a")
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(e["event"], e["id"]) for e in events] == [("shown", "a"), ("accepted", "a")]
    blocked = tmp_path / "file"
    blocked.write_text("")
    log.configure(True, str(blocked / "events.jsonl"))
    assert "not writable" in log.record("shown", id="b")
