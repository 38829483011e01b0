"""Validator core without compilers: problem/candidate parsing, .cu discovery, verdict JSON, the host/device split
and compiler-message mapping."""

import pytest

from dice_copilot.validator import Candidate, Diagnostic, InputError, Problem, TimingStats, Verdict
from dice_copilot.validator.compile import GeneratedFile, _Chunk, load_inline_sources, map_diagnostics
from dice_copilot.validator.kernel_split import SplitError, split_host_device

CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

kernel = """
__global__ void twice_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    twice_kernel<<<(n + 255) / 256, 256>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="twice", cpp_sources="torch::Tensor twice(torch::Tensor x);", cuda_sources=kernel,
                  functions=["twice"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''

REFERENCE = '''import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return 2 * x

def get_inputs():
    return [torch.randn(16)]

def get_init_inputs():
    return []
'''


def test_problem_from_source_requires_model_and_inputs():
    assert Problem.from_source(REFERENCE).class_name == "Model"
    with pytest.raises(InputError, match="get_inputs"):
        Problem.from_source("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    with pytest.raises(InputError, match="no class named 'Net'"):
        Problem.from_source(REFERENCE, class_name="Net")
    with pytest.raises(InputError, match="not valid Python"):
        Problem.from_source("def (:\n")


def test_a_constructor_with_arguments_needs_get_init_inputs():
    needs = REFERENCE.replace("def get_init_inputs():\n    return []\n", "").replace(
        "class Model(torch.nn.Module):", "class Model(torch.nn.Module):\n    def __init__(self, dim, eps=1e-5, *, "
        "scale):\n        super().__init__()\n")
    with pytest.raises(InputError, match=r"`Model.__init__` takes dim, scale but there is no `get_init_inputs\(\)`"):
        Problem.from_source(needs)
    assert Problem.from_source(needs + "\ndef get_init_inputs():\n    return [8]\n")
    # Every parameter has a default: the module is built with none, and get_init_inputs may be left out.
    assert Problem.from_source(needs.replace("dim, eps=1e-5, *, scale", "dim=8, *, scale=1.0"))


def test_unreadable_problem_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        Problem.from_file(tmp_path / "missing.py")


def test_candidate_extension_is_found_statically_with_string_line():
    candidate = Candidate.from_source(CANDIDATE, path="cand.py")
    assert candidate.class_name == "ModelNew" and candidate.specs_complete
    (spec,) = candidate.static_specs
    assert spec.name == "twice" and spec.functions == ["twice"]
    assert "__global__ void twice_kernel" in spec.cuda_sources[0]
    # The string starts on line 4 (the line of the opening quotes); its first line is empty.
    assert spec.cuda_segments[0].file_line == 4


def test_runtime_kwargs_hash_like_the_static_spec():
    from dice_copilot.validator.problem import ExtensionSpec
    (spec,) = Candidate.from_source(CANDIDATE).static_specs
    runtime = ExtensionSpec.from_call_kwargs("load_inline", dict(
        name="twice", cpp_sources=["torch::Tensor twice(torch::Tensor x);"], cuda_sources=spec.cuda_sources[0],
        functions="twice", verbose=True))
    assert runtime.content_key() == spec.content_key()


def test_unresolvable_sources_are_reported_incomplete():
    source = CANDIDATE.replace("cuda_sources=kernel", "cuda_sources=make_kernel()")
    candidate = Candidate.from_source(source)
    assert candidate.static_specs == [] and not candidate.specs_complete


def test_cu_file_finds_the_python_module_that_builds_it(tmp_path):
    (tmp_path / "kernels").mkdir()
    cu = tmp_path / "kernels" / "scale.cu"
    cu.write_text("__global__ void scale(float* x) { x[threadIdx.x] *= 2.f; }\n")
    builder = tmp_path / "model_new.py"
    builder.write_text("from torch.utils.cpp_extension import load\n"
                       "ext = load(name='scale', sources=['kernels/scale.cu'])\n"
                       "class ModelNew:\n    pass\n")
    candidate = Candidate.from_file(cu)
    assert candidate.builder_path == str(builder) and candidate.runnable
    (spec,) = candidate.static_specs
    assert spec.source_paths == [str(cu.resolve())]
    # Unsaved editor text replaces the file's content.
    edited = Candidate.from_source("__global__ void scale(float* x) { x[threadIdx.x] *= 3.f; }\n", path=cu)
    assert "3.f" in edited.static_specs[0].cuda_sources[0]


def test_cu_file_without_builder_is_compile_only(tmp_path):
    cu = tmp_path / "lonely.cu"
    cu.write_text("__global__ void k() {}\n")
    candidate = Candidate.from_file(cu)
    assert not candidate.runnable and candidate.static_specs[0].cuda_sources == ["__global__ void k() {}\n"]


def test_verdict_json_round_trip_and_summaries():
    verdict = Verdict(stage="timed", passed=True, speedup=2.4, timing={
        "candidate": TimingStats(1.0, 1.0, 0.1, 100), "reference": TimingStats(2.4, 2.4, 0.1, 100)},
        diagnostics=[Diagnostic(3, 1, "warning", "unused", "a.py")], flags=["excessive_speedup"])
    again = Verdict.from_json(verdict.to_json())
    assert again == verdict
    assert again.summary().startswith("✓ correct, 2.40× vs torch (median of 100)")
    failed = Verdict(stage="static", failure_code="compile_error", failure="x",
                     diagnostics=[Diagnostic(12, 5, "error", "expected ';'", "a.py")])
    assert failed.summary() == "✗ compile error at line 12: expected ';'"
    assert "no CUDA device" in Verdict(stage="compile", passed=True, compile_only=True).summary()


def test_split_moves_kernels_away_from_torch_and_rewrites_launches():
    (spec,) = Candidate.from_source(CANDIDATE, path="cand.py").static_specs
    _, cuda = load_inline_sources(spec)
    split = split_host_device(cuda[3:])
    host_text, device_text = "\n".join(c.text for c in split.host), "\n".join(c.text for c in split.device)
    assert "torch" not in device_text and 'extern "C" __global__ void twice_kernel' in device_text
    assert split.kernels == ["twice_kernel"] and "cudaLaunchKernel" in host_text
    assert "twice_kernel<<<" not in host_text and "__dice_launch_twice_kernel(dim3((n + 255) / 256)" in host_text
    # The launch spanned two lines; the rewrite keeps the host function's line count.
    original = next(c for c in cuda[3:]).text
    body = original[original.index("torch::Tensor twice"):]
    rewritten = host_text[host_text.index("torch::Tensor twice"):]
    assert body.count("\n") == rewritten.count("\n") + (1 if body.endswith("\n") else 0)


def test_split_refuses_templated_kernels():
    source = "template <typename T> __global__ void k(T* x) {}\ntorch::Tensor f(torch::Tensor x) { return x; }\n"
    with pytest.raises(SplitError):
        split_host_device([_Chunk(source)])


def test_compiler_messages_map_to_lines_inside_python_strings(tmp_path):
    (spec,) = Candidate.from_source(CANDIDATE, path="cand.py").static_specs
    _, cuda = load_inline_sources(spec)
    generated = GeneratedFile.write(tmp_path / "cuda.cu", cuda)
    # cuda.cu: 3 implicit include lines, then the string, whose first line is file line 4 (generated line 4).
    log = (f"{tmp_path}/cuda.cu(7): error: identifier \"y\" is undefined\n"
           f"{tmp_path}/cuda.cu:12:5: error: expected ';' before 'return'\n")
    diags = map_diagnostics(log, [generated])
    assert [(d.file, d.line) for d in diags] == [("cand.py", 7), ("cand.py", 12)]
    assert diags[0].message.startswith('identifier "y" is undefined')
