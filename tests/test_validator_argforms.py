"""Every argument form torch's `load_inline` / `load` accept, read with torch's meaning: the static guess of each
extension equals what the candidate's own call builds when it runs (found in `__init__`, through aliases, from
files next to the module...); flags become argv words, never an empty argument; what torch's build fails on fails
here with the reason; what the fast path does not reproduce goes to torch's own build. Then the compile stage with
the real nvcc/g++ (no GPU needed): the KernelBench example's `extra_cflags=[""]` form links, through the fast path
and torch's own build alike, and a `.cu` built by a sibling module's `load()` is compiled, errors and all."""

import inspect
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from dice_copilot.validator import Budget, Candidate, ValidatorPool
from dice_copilot.validator import compile as compile_module
from dice_copilot.validator.compile import CompileConfig, ExtensionBuilder
from dice_copilot.validator.problem import (BUILD_ONLY_PARAMETERS, LOAD_INLINE_PARAMETERS, LOAD_PARAMETERS,
                                            ExtensionSpec, bind_call)
from dice_copilot.validator.static_checks import check_static

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    def get_inputs():
        return [torch.randn(4096)]

    def get_init_inputs():
        return []
''')

KERNEL = textwrap.dedent('''
    __global__ void twice_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }

    torch::Tensor twice(torch::Tensor x) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        twice_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
''')
DECL = "torch::Tensor twice(torch::Tensor x);"
FORWARD = '''

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''
KERNEL_FILE = "#include <torch/types.h>\n" + KERNEL  # a .cu of its own: for load_inline to read, or for load()
BINDING_FILE = textwrap.dedent('''
    #include <torch/extension.h>
    torch::Tensor twice(torch::Tensor x);
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice, "doubles x"); }
''')


def _module(body: str, forward: str = FORWARD) -> str:
    head = "import os\nimport textwrap\nfrom pathlib import Path\n\nimport torch\n"
    return head + f"\nKERNEL = '''{KERNEL}'''\nDECL = {DECL!r}\n" + textwrap.dedent(body) + forward


# Each form as people and models write it: (candidate source, files written beside it).
FORMS = {
    # The example the DICE prompt embeds (KernelBench's): empty flag strings, verbose.
    "kernelbench_example": (_module('''
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="twice_ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["twice"],
                          verbose=True, extra_cflags=[""], extra_ldflags=[""])
    '''), {}),
    "blank_and_spaced_flags": (_module('''
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="twice_ext", cpp_sources=[DECL], cuda_sources=[KERNEL], functions="twice",
                          extra_cflags=["", " -O2 "], extra_cuda_cflags=["-O3 --use_fast_math", " "],
                          extra_ldflags=[" "])
    '''), {}),
    # Several flags in one string (a macro the kernel insists on), an include path, docstrings, arguments that
    # only steer torch's own build.
    "flags_in_one_string_include_path_docstrings": (_module('''
        import tempfile
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="twice_ext", cpp_sources=DECL,
                          cuda_sources=GUARD + KERNEL.replace("2.0f", "FACTOR"), functions={"twice": "doubles x"},
                          with_cuda=True, extra_cuda_cflags=["-O3 -DUSE_FACTOR", ""],
                          extra_include_paths=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")],
                          build_directory=tempfile.mkdtemp(), keep_intermediates=False, is_python_module=True)
    '''.replace("GUARD", repr('#include "factor.h"\n#ifndef USE_FACTOR\n#error no USE_FACTOR\n#endif\n'))),
        {"inc/factor.h": "#define FACTOR 2.0f\n"}),
    "positional_arguments": (_module('''
        from torch.utils.cpp_extension import load_inline
        ext = load_inline("twice_ext", DECL, [KERNEL], None, ["twice"], ["-O2"])
    '''), {}),
    "built_in_init_through_the_module": (_module('''
        from torch.utils import cpp_extension
    ''', forward='''

class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        source = KERNEL.replace("2.0f * x[i]", "x[i] + x[i]")
        self.ext = cpp_extension.load_inline(name="twice_init_ext", cpp_sources=[DECL], cuda_sources=[source],
                                             functions=["twice"], verbose=False)

    def forward(self, x):
        return self.ext.twice(x)
'''), {}),
    # Two extensions: one at import through a module alias, one built in __init__.
    "two_extensions_in_one_file": (_module('''
        import torch.utils.cpp_extension as ce
        ext = ce.load_inline(name="twice_ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["twice"])
        COPY = KERNEL.replace("twice", "copy").replace("2.0f * x[i]", "x[i]")
    ''', forward='''

class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.copy = ce.load_inline(name="copy_ext", cpp_sources=DECL.replace("twice", "copy"), cuda_sources=COPY,
                                   functions=["copy"])

    def forward(self, x):
        return self.copy.copy(ext.twice(x))
'''), {}),
    # The candidate's own module block, binding under another Python name (no `functions`).
    "pybind_module_in_cpp_sources": (_module('''
        from torch.utils.cpp_extension import load_inline
        BIND = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &twice, "doubles x"); }'
        ext = load_inline(name="twice_pybind", cpp_sources=DECL + "\\n" + BIND, cuda_sources=KERNEL)
    ''', forward=FORWARD.replace("ext.twice(x)", "ext.forward(x)")), {}),
    "sources_read_from_files": (_module('''
        from torch.utils.cpp_extension import load_inline
        HERE = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(HERE, "twice.cu")) as handle:
            kernel = handle.read()
        ext = load_inline(name="twice_ext", cpp_sources=Path(__file__).with_name("decl.h").read_text(),
                          cuda_sources=kernel, functions=["twice"])
    '''), {"twice.cu": KERNEL_FILE, "decl.h": DECL + "\n"}),
    "load_of_files": (_module('''
        from torch.utils.cpp_extension import load
        HERE = Path(__file__).resolve().parent
        ext = load(name="twice_files", sources=[os.path.join(str(HERE), "twice.cu"), str(HERE / "bind.cpp")],
                   extra_cflags=[""], extra_ldflags=[""], verbose=True)
    '''), {"twice.cu": KERNEL_FILE, "bind.cpp": BINDING_FILE}),
    "formatted_and_dedented": (_module('''
        from torch.utils.cpp_extension import load_inline as build
        BLOCK = 256
        DEVICE = """
            __global__ void twice_kernel(const float* x, float* y, int n) {
                int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
                if (i < n) y[i] = 2.0f * x[i];
            }
            """
        HOST = """
        torch::Tensor twice(torch::Tensor x) {
            auto y = torch::empty_like(x);
            int n = x.numel();
            twice_kernel<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """
        body = textwrap.dedent(DEVICE.replace("BLOCK_SIZE", str(BLOCK)))
        body += HOST.replace("BLOCK_SIZE", "%d" % BLOCK)
        ext = build(name=f"twice_{BLOCK}", cpp_sources=DECL, cuda_sources=body.strip(), functions=["twice"])
    '''), {}),
}


def _write(tmp_path: Path, form: str) -> Path:
    source, files = FORMS[form]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = tmp_path / "model_new.py"
    path.write_text(source)
    return path


def _runtime_specs(path: Path) -> list[ExtensionSpec]:
    """The specs the worker's loader makes of the candidate's own calls: the module runs (import and
    `ModelNew()`) with the loader in place of torch's functions, as in the harness; nothing is built."""
    from dice_copilot.validator import harness

    loader = harness.ExtensionLoader({"prebuilt": {}, "compile_config": {}}, Budget(), channel=None)
    built: list[ExtensionSpec] = []

    def record(spec):
        built.append(spec)
        return type("Extension", (), {"twice": None, "copy": None})

    loader._import = record
    namespace = {"__file__": str(path), "__name__": "model_new"}
    with harness._patched_extension_loading(loader):
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        namespace["ModelNew"]()
    return built


# ---------------------------------------------------------------- reading the arguments as torch does

def test_the_parameter_orders_are_the_installed_torchs():
    from torch.utils import cpp_extension
    assert tuple(inspect.signature(cpp_extension.load_inline).parameters) == LOAD_INLINE_PARAMETERS
    assert tuple(inspect.signature(cpp_extension.load).parameters) == LOAD_PARAMETERS
    assert set(BUILD_ONLY_PARAMETERS) <= set(LOAD_INLINE_PARAMETERS)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_found_statically_as_the_running_candidate_builds_it(form, tmp_path):
    path = _write(tmp_path, form)
    candidate = Candidate.from_file(path)
    assert candidate.specs_complete, candidate.unresolved_calls
    runtime = _runtime_specs(path)
    assert sorted(s.content_key() for s in candidate.static_specs) == sorted(s.content_key() for s in runtime)
    assert len(runtime) == (2 if form == "two_extensions_in_one_file" else 1)
    for spec in candidate.static_specs:
        assert spec.argument_errors == [] and "" not in spec.extra_cflags + spec.extra_cuda_cflags + spec.extra_ldflags
    # honest kernels in ordinary styles: nothing for the static checks to reject
    for policy in ("ide", "strict"):
        assert [f for f in check_static(path.read_text(), policy, REFERENCE) if f.severity == "error"] == []


def test_empty_flags_are_no_flags_so_the_example_builds_what_a_flagless_call_builds():
    plain = ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources=DECL, cuda_sources=KERNEL))
    example = ExtensionSpec.from_call_kwargs("load_inline", dict(
        name="e", cpp_sources=[DECL], cuda_sources=[KERNEL], extra_cflags=[""], extra_cuda_cflags=[" ", ""],
        extra_ldflags=[""], verbose=True, build_directory="/tmp/x", keep_intermediates=False, use_pch=True))
    assert example.content_key() == plain.content_key()


@pytest.mark.parametrize("flags, words", [
    ([""], []),
    ([" -O3 ", "", "\t"], ["-O3"]),
    (["-O3 --use_fast_math", "-lineinfo"], ["-O3", "--use_fast_math", "-lineinfo"]),
    (("-Xptxas", "-v"), ["-Xptxas", "-v"]),
    (["-DGREETING='hello world'"], ["-DGREETING=hello world"]),  # the shell's quotes group
    ("", []),
    ("   ", []),
])
def test_flag_lists_become_the_argv_words_torchs_build_passes(flags, words):
    for argument in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
        spec = ExtensionSpec.from_call_kwargs("load_inline", {"name": "e", "cpp_sources": "", argument: flags})
        assert getattr(spec, argument) == words and spec.argument_errors == []


@pytest.mark.parametrize("flags, says", [
    ("-O3", "is a string: torch's build reads it one character at a time ('-', 'O', '3', ...)"),
    (["-DX='unclosed"], "unmatched quote"),
    ([3], "must be a list of strings"),
    (True, "must be a list of strings"),
])
def test_flags_torchs_build_fails_on_are_argument_errors_that_name_the_fix(flags, says):
    spec = ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources="", extra_cuda_cflags=flags))
    (error,) = spec.argument_errors
    assert says in error and error.startswith("extra_cuda_cflags")
    if isinstance(flags, str):
        assert "pass a list, e.g. extra_cuda_cflags=['-O3']" in error


def test_include_paths_are_stripped_and_made_absolute_as_torch_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources="",
                                                              extra_include_paths=[" inc ", str(tmp_path / "b")]))
    assert spec.extra_include_paths == [str(tmp_path / "inc"), str(tmp_path / "b")]


def test_functions_as_a_name_a_list_or_a_dict_of_docstrings():
    def functions(value):
        spec = ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources="", functions=value))
        return spec.functions, spec.argument_errors

    assert functions("twice") == functions(["twice"]) == (["twice"], [])
    assert functions({"twice": "doubles x"}) == ({"twice": "doubles x"}, [])
    value, (error,) = functions(("twice",))
    assert value is None and "a list of names or a dict of docstrings, not a tuple" in error


def test_positional_arguments_bind_as_torch_binds_them():
    assert bind_call("load_inline", ("e", DECL, KERNEL, None, ["twice"]), {"verbose": True}) == dict(
        name="e", cpp_sources=DECL, cuda_sources=KERNEL, sycl_sources=None, functions=["twice"], verbose=True)
    assert bind_call("load", ("e", ["k.cu"], ["-O2"]), {}) == dict(name="e", sources=["k.cu"], extra_cflags=["-O2"])
    with pytest.raises(TypeError, match="multiple values for argument 'cpp_sources'"):
        bind_call("load_inline", ("e", DECL), {"cpp_sources": DECL})
    with pytest.raises(TypeError, match="takes 14 arguments"):
        bind_call("load", tuple(range(15)), {})


@pytest.mark.parametrize("kwargs, says", [
    (dict(name="fused-gelu"), "name='fused-gelu' is not a C identifier"),
    (dict(name="e", sycl_sources=["x"]), "SYCL"),
    (dict(name="e", cpp_sources=("a", "b")), "cpp_sources is a tuple"),
    (dict(name="e", extra_flags=["-O3"]), "unexpected keyword argument 'extra_flags'"),
    (dict(name="e", cpp_sources=None), "cpp_sources is missing or None"),
])
def test_arguments_torchs_load_inline_fails_on_are_argument_errors(kwargs, says):
    spec = ExtensionSpec.from_call_kwargs("load_inline", {"cpp_sources": DECL, **kwargs})
    assert any(says in error for error in spec.argument_errors), spec.argument_errors


def test_a_non_identifier_name_is_fine_for_a_library_torch_does_not_import():
    spec = ExtensionSpec.from_call_kwargs("load_inline", dict(name="my-ops", cpp_sources="",
                                                              is_python_module=False))
    assert spec.argument_errors == [] and not spec.is_python_module


def test_what_the_layouts_here_do_not_reproduce_is_left_to_torchs_own_build():
    spec = ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources=DECL, cuda_sources=KERNEL,
                                                              with_cuda=False))
    assert "with_cuda=False" in spec.torch_build_reason
    assert ExtensionSpec.from_call_kwargs("load_inline", dict(name="e", cpp_sources=DECL, cuda_sources=KERNEL,
                                                              with_cuda=True)).torch_build_reason is None


def test_calls_of_other_load_functions_are_not_extensions(tmp_path):
    source = textwrap.dedent('''
        import json, pickle
        import torch
        from torch.utils.cpp_extension import load_inline
        config = json.load(open("config.json"))
        weights = torch.load("weights.pt", "cpu")

        def load(name, sources):  # the candidate's own helper, not torch's
            return None

        ext = load("x", "y")
        class ModelNew(torch.nn.Module):
            pass
    ''')
    candidate = Candidate.from_source(source, path=str(tmp_path / "c.py"))
    assert candidate.static_specs == [] and candidate.unresolved_calls == []


def test_an_unresolvable_call_says_where_and_on_what_it_depends():
    source = _module('''
        import random
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="twice_ext", cpp_sources=DECL, cuda_sources=KERNEL * random.randint(1, 2),
                          functions=["twice"])
    ''')
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "ext = load_inline" in text)
    candidate = Candidate.from_source(source, path="c.py")
    assert candidate.static_specs == []
    (reason,) = candidate.unresolved_calls
    assert reason.startswith(f"line {line}: load_inline(...) uses `") and "random.randint" in reason


def test_argument_in_a_method_is_not_taken_from_the_class_body():
    # Python's scoping: a method does not see the class body's names, so neither does the static guess.
    source = _module('''
        from torch.utils.cpp_extension import load_inline
    ''', forward='''

class ModelNew(torch.nn.Module):
    SOURCE = "not the kernel"

    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="twice_ext", cpp_sources=DECL, cuda_sources=SOURCE, functions=["twice"])
''')
    source += "\nSOURCE = KERNEL\n"
    (spec,) = Candidate.from_source(source, path="c.py").static_specs
    assert spec.cuda_sources == [KERNEL]


def test_source_lines_survive_dedent_strip_and_reads_of_files(tmp_path):
    path = _write(tmp_path, "formatted_and_dedented")
    (spec,) = Candidate.from_file(path).static_specs
    lines = path.read_text().splitlines()
    first = spec.cuda_segments[0]
    assert first.file_line == next(i for i, text in enumerate(lines, 1) if 'DEVICE = """' in text) + 1
    path = _write(tmp_path, "sources_read_from_files")
    (spec,) = Candidate.from_file(path).static_specs
    assert [(s.file, s.file_line) for s in spec.cuda_segments] == [(str(tmp_path / "twice.cu"), 1)]


# ---------------------------------------------------------------- .cu files built by a sibling module

def _cu_project(tmp_path: Path, builder: str, cu_text: str = KERNEL_FILE) -> Path:
    (tmp_path / "kernels").mkdir()
    cu = tmp_path / "kernels" / "twice.cu"
    cu.write_text(cu_text)
    (tmp_path / "kernels" / "bind.cpp").write_text(BINDING_FILE)
    (tmp_path / "model_new.py").write_text(builder)
    return cu


LOAD_BUILDER = _module('''
    from torch.utils.cpp_extension import load
    HERE = os.path.dirname(os.path.abspath(__file__))
    ext = load(name="twice_files", sources=[os.path.join(HERE, "kernels", "twice.cu"),
                                            os.path.join(HERE, "kernels", "bind.cpp")])
''')


def test_a_cu_file_built_by_a_sibling_modules_load_is_compiled_with_that_call(tmp_path):
    cu = _cu_project(tmp_path, LOAD_BUILDER)
    candidate = Candidate.from_file(cu)
    assert candidate.runnable and candidate.specs_complete and candidate.builder_path == str(tmp_path / "model_new.py")
    (spec,) = candidate.static_specs
    assert spec.source_paths == [str(cu), str(tmp_path / "kernels" / "bind.cpp")]
    edited = Candidate.from_source(KERNEL_FILE.replace("2.0f", "4.0f"), path=cu)  # the editor's unsaved text
    assert "4.0f" in edited.static_specs[0].cuda_sources[0]


def test_a_cu_file_whose_builder_defines_no_model_new_is_compiled_only(tmp_path):
    cu = _cu_project(tmp_path, LOAD_BUILDER.replace("class ModelNew", "class TwiceModule"))
    candidate = Candidate.from_file(cu)
    assert not candidate.runnable and "model_new.py, the module that builds this .cu file, defines no class " \
        "ModelNew" in candidate.not_run_reason
    assert candidate.static_specs[0].source_paths[0] == str(cu)  # still compiled, with the builder's call


def test_a_cu_file_whose_builder_computes_its_sources_at_run_time_says_so(tmp_path):
    cu = _cu_project(tmp_path, LOAD_BUILDER.replace('"twice.cu"', '"twice.cu" if os.getpid() else "x"'))
    candidate = Candidate.from_file(cu)
    assert not candidate.specs_complete and "os.getpid" in candidate.unresolved_calls[0]


@pytest.mark.parametrize("case", ["unresolved", "no_extension"])
def test_a_compile_stage_that_compiled_nothing_is_not_reported_as_passed(case, tmp_path):
    if case == "unresolved":
        source = _module('''
            import random
            from torch.utils.cpp_extension import load_inline
            ext = load_inline(name="twice_ext", cpp_sources=DECL, cuda_sources=KERNEL * random.randint(1, 1),
                              functions=["twice"])
        ''')
    else:  # PyTorch's own kernels (Triton's alike) compile when they first run, on a device
        source = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    with ValidatorPool(gpus=[], compile_config=CompileConfig(cache_dir=tmp_path / "cache"), warm=False) as pool:
        verdict = pool.validate(REFERENCE, Candidate.from_source(source, path="cand.py"), "ide")
    assert not verdict.passed and verdict.outcome == "not_checked" and verdict.failure_code == "environment"
    assert verdict.failed_stage == "compile" and "builds" not in verdict.details
    assert ("random.randint" in verdict.failure) == (case == "unresolved")
    assert ("builds no CUDA extension" in verdict.failure) == (case == "no_extension")


# ---------------------------------------------------------------- no ModelNew: rejected before any build

@pytest.mark.parametrize("policy", ["ide", "strict"])
@pytest.mark.parametrize("source, says", [
    ("", "no class ModelNew: the candidate file is empty"),
    ("ModelNew ModelNew the the ) kernel", "not valid Python"),  # model noise
    ("import torch\nx = torch.zeros(3)  # noise that parses\n", "no class ModelNew: the candidate defines none"),
    (REFERENCE, "no class ModelNew: the candidate defines none"),
])
def test_an_empty_or_model_less_candidate_is_rejected_in_both_policies(source, says, policy, tmp_path):
    with ValidatorPool(gpus=[], compile_config=CompileConfig(cache_dir=tmp_path / "cache"), warm=False) as pool:
        verdict = pool.validate(REFERENCE, source, policy)
    assert not verdict.passed and says in verdict.failure
    assert verdict.failure_code == ("bad_input" if "not valid" in says else "static")
    if verdict.failure_code == "static":
        assert "rejected by static check 'no_model_new'" in verdict.failure
        assert "must define `class ModelNew(nn.Module)`" in verdict.failure
    assert "builds" not in verdict.details  # nothing was compiled


# ---------------------------------------------------------------- the builder: no empty argument, any path

FAKE_COMPILER = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_COMMANDS"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    if any(not a.strip() for a in args):
        sys.exit("cannot find : No such file or directory (an empty argument)")
    if "-o" in args:
        open(args[args.index("-o") + 1], "w").write("built")
''')


@pytest.fixture
def fake_builder(tmp_path, monkeypatch):
    fake = tmp_path / "fake-compiler"
    fake.write_text(FAKE_COMPILER.format(python=sys.executable))
    fake.chmod(0o755)
    commands = tmp_path / "commands.jsonl"
    monkeypatch.setenv("FAKE_COMMANDS", str(commands))

    def builder(mode):
        config = CompileConfig(cache_dir=tmp_path / f"cache-{mode}", use_pch=False, nvcc=str(fake), cxx=str(fake),
                               mode=mode)
        return ExtensionBuilder(config)

    builder.commands = lambda: [json.loads(line) for line in commands.read_text().splitlines()]
    return builder


@pytest.mark.parametrize("form", ["kernelbench_example", "blank_and_spaced_flags", "load_of_files"])
@pytest.mark.parametrize("mode", ["fast", "kernelbench"])
def test_no_empty_argument_reaches_a_compiler_or_the_linker(form, mode, fake_builder, tmp_path):
    (spec,) = Candidate.from_file(_write(tmp_path, form)).static_specs
    result = fake_builder(mode).build(spec)
    assert result.ok, result.log[-2000:]
    commands = fake_builder.commands()
    assert commands and all(all(a.strip() for a in command) for command in commands)
    links = [c for c in commands if "-shared" in c and not any(a.endswith((".cu", ".cpp")) for a in c)]
    assert links, commands
    if form == "blank_and_spaced_flags":
        assert any("-O2" in c and "-c" in c for c in commands)  # the C++ units
        assert any("--use_fast_math" in c for c in commands)  # the nvcc unit (or the cubin)
    if form == "load_of_files":  # one unit per file, as torch compiles them
        compiled = {a for c in commands if "-c" in c or "-cubin" in c for a in c if a.endswith((".cu", ".cpp"))}
        assert compiled == {"src0_twice.cu", "src1_bind.cpp"} or {"src0_twice.cu", "src1_bind.cpp"} <= compiled


def test_an_argument_torch_fails_on_fails_the_build_at_the_call_without_compiling(fake_builder, tmp_path):
    source = FORMS["kernelbench_example"][0].replace('extra_cflags=[""]', 'extra_cflags="-O3"')
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "ext = load_inline" in text)
    (spec,) = Candidate.from_source(source, path="cand.py").static_specs
    result = fake_builder("fast").build(spec)
    assert not result.ok and result.strategy == "arguments" and not (tmp_path / "commands.jsonl").exists()
    (error,) = result.diagnostics
    assert (error.file, error.line) == ("cand.py", line) and "extra_cflags='-O3' is a string" in error.message


@pytest.mark.parametrize("why", ["mode", "with_cuda=False"])
def test_what_the_fast_path_does_not_reproduce_goes_to_torchs_own_build(why, tmp_path, monkeypatch):
    seen = []

    def torch_build(spec, build_dir, arch, timeout_s):
        seen.append(spec)
        return compile_module.BuildResult(True, spec.name, str(build_dir / "x.so"), "built by torch", 0.1)

    monkeypatch.setattr(compile_module, "kernelbench_load_inline", torch_build)
    mode = "load_inline" if why == "mode" else "fast"
    kwargs = dict(name="e", cpp_sources=DECL, cuda_sources=KERNEL, with_cuda=False if why != "mode" else None)
    spec = ExtensionSpec.from_call_kwargs("load_inline", kwargs)
    result = ExtensionBuilder(CompileConfig(cache_dir=tmp_path, mode=mode)).build(spec)
    assert result.ok and seen == [spec]
    assert ("with_cuda=False" in result.log) == (why != "mode")


def test_torchs_own_build_is_given_the_argv_words_never_an_empty_flag(tmp_path, monkeypatch):
    sent = []

    class Process:  # stands in for the subprocess that runs torch's load_inline
        pid = returncode = 0

        def __init__(self, *args, **kwargs):
            pass

        def communicate(self, text, timeout=None):
            sent.append(json.loads(text))
            return "DICE_OK /x/e.so\n", None

    monkeypatch.setattr(compile_module.subprocess, "Popen", Process)
    (spec,) = Candidate.from_file(_write(tmp_path, "blank_and_spaced_flags")).static_specs
    assert compile_module.kernelbench_load_inline(spec, tmp_path / "build", "sm_90", 60).ok
    (call,) = sent
    assert call["function"] == "load_inline" and call["extra_cflags"] == ["-O2"] and call["extra_ldflags"] == []
    assert call["extra_cuda_cflags"] == ["-O3", "--use_fast_math"]
    quoted = compile_module.shell_quoted(["-DGREETING=hello world"])
    assert quoted == ["'-DGREETING=hello world'"]  # one word again once torch's shell has split its command


# ---------------------------------------------------------------- a reference that builds an extension itself

# One file holding the reference beside its ModelNew (the README's example, a kernel file open in the editor): the
# reference's import runs the file's load_inline too.
REFERENCE_WITH_ITS_OWN_EXTENSION = REFERENCE + textwrap.dedent(f'''
    from torch.utils.cpp_extension import load_inline

    ext = load_inline(name="twice_ref", cpp_sources={DECL!r}, cuda_sources={KERNEL!r}, functions=["twice"])
''') + FORWARD


# The harness job in a process of its own, as in a worker (its thread count is the worker's own), with every build
# it asks for refused (a CPU torch builds no CUDA extension) and recorded.
REFERENCE_JOB = '''
import json, sys
from dataclasses import asdict
from dice_copilot.validator import Budget, compile as compile_module, harness

asked = []

def refuse(self, spec, timeout_s=None):
    asked.append(spec.name)
    return compile_module.BuildResult(False, spec.name, None, "twice.cu(3): error: refused by the test", 0.0)

compile_module.ExtensionBuilder.build = refuse
reference, candidate = json.load(sys.stdin)
msg = {"problem_source": reference, "candidate_source": candidate, "policy": "ide", "device": "cpu",
       "budget": asdict(Budget(timing=False)), "seed": 0, "prebuilt": {}, "kernel_names": [], "compile_config": {}}
outcome = harness._run_job(msg, harness._SilentChannel())
print(json.dumps({"passed": outcome["passed"], "failure_code": outcome.get("failure_code"),
                  "failure": outcome.get("failure"), "builds_asked": asked}))
'''


def _reference_job(reference: str, candidate: str) -> dict:
    """A job of the worker's harness, run on the CPU (the correctness checks run on any device)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", REFERENCE_JOB], input=json.dumps([reference, candidate]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_reference_whose_file_builds_an_extension_it_does_not_use_builds_nothing():
    plain_candidate = REFERENCE + "\nclass ModelNew(Model):\n    pass\n"
    outcome = _reference_job(REFERENCE_WITH_ITS_OWN_EXTENSION, plain_candidate)
    assert outcome["passed"], outcome["failure"]
    assert outcome["builds_asked"] == []


def test_a_reference_that_uses_its_own_extension_builds_it_through_the_validator_and_a_failure_is_the_references():
    uses_it = REFERENCE_WITH_ITS_OWN_EXTENSION.replace("return 2 * x", "return ext.twice(x)", 1)
    outcome = _reference_job(uses_it, REFERENCE + "\nclass ModelNew(Model):\n    pass\n")
    assert outcome["builds_asked"] == ["twice_ref"]
    assert (outcome["passed"], outcome["failure_code"]) == (False, "bad_input")
    assert outcome["failure"].startswith("the reference module's own extension")


# ---------------------------------------------------------------- real nvcc / g++ (slow here: torch headers)

@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """Compile-only pools (no GPU use) sharing one build cache: the fast path, and torch's own load_inline."""
    cache = tmp_path_factory.mktemp("cache")
    made = {mode: ValidatorPool(gpus=[], warm=False, compile_config=CompileConfig(
        cache_dir=cache / mode, use_pch=False, mode=mode, timeout_s=1500)) for mode in ("fast", "load_inline")}
    yield made
    for pool in made.values():
        pool.shutdown()


PATIENT = Budget(compile_timeout_s=1500)  # torch headers on a busy 2-core machine


def _no_empty_argument(log: str) -> bool:
    return all(" '' " not in line and not line.endswith(" ''") for line in log.splitlines() if line.startswith("$ "))


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "load_inline"])
def test_the_kernelbench_example_form_compiles_and_links(mode, pools, tmp_path):
    verdict = pools[mode].validate(REFERENCE, Candidate.from_file(_write(tmp_path, "kernelbench_example")),
                                   budget=PATIENT)
    assert verdict.passed and verdict.compile_only, (verdict.failure, verdict.compiler_log[-3000:])
    assert _no_empty_argument(verdict.compiler_log)
    (build,) = verdict.details["builds"]
    assert build["strategy"] == ("split" if mode == "fast" else "kernelbench")


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "load_inline"])
def test_flags_in_one_string_an_include_path_and_docstrings_compile_through_both_paths(mode, pools, tmp_path):
    path = _write(tmp_path, "flags_in_one_string_include_path_docstrings")
    verdict = pools[mode].validate(REFERENCE, Candidate.from_file(path), budget=PATIENT)
    assert verdict.passed and verdict.compile_only, (verdict.failure, verdict.compiler_log[-3000:])
    assert _no_empty_argument(verdict.compiler_log)


@needs_nvcc
@pytest.mark.slow
def test_two_extensions_one_built_in_init_compile_through_the_fast_path(pools, tmp_path):
    verdict = pools["fast"].validate(REFERENCE, Candidate.from_file(_write(tmp_path, "two_extensions_in_one_file")),
                                     budget=PATIENT)
    assert verdict.passed and verdict.compile_only, (verdict.failure, verdict.compiler_log[-3000:])
    assert sorted(b["extension"] for b in verdict.details["builds"]) == ["copy_ext", "twice_ext"]


TWO_FILE_KERNELS = {
    # Two .cu files with a file-local helper of the same name: fine as two units (as torch builds them), a
    # redefinition if they were one.
    "kernels/twice.cu": "#include <torch/types.h>\nstatic __device__ float scale(float v) { return 2.0f * v; }\n"
                        + KERNEL.replace("2.0f * x[i]", "scale(x[i])"),
    "kernels/helper.cu": "static __device__ float scale(float v) { return v; }\n"
                         "__global__ void unused_kernel(float* y) { y[threadIdx.x] = scale(1.0f); }\n",
}
TWO_FILE_BUILDER = _module('''
    from torch.utils.cpp_extension import load
    KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
    ext = load(name="twice_files", sources=[os.path.join(KERNELS, "twice.cu"), os.path.join(KERNELS, "helper.cu"),
                                            os.path.join(KERNELS, "bind.cpp")])
''')


def _two_file_project(tmp_path: Path) -> Path:
    cu = _cu_project(tmp_path, TWO_FILE_BUILDER, TWO_FILE_KERNELS["kernels/twice.cu"])
    (tmp_path / "kernels" / "helper.cu").write_text(TWO_FILE_KERNELS["kernels/helper.cu"])
    return cu


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "load_inline"])
def test_a_cu_built_by_a_sibling_load_is_compiled_without_a_gpu(mode, pools, tmp_path):
    cu = _two_file_project(tmp_path)
    verdict = pools[mode].validate(REFERENCE, Candidate.from_file(cu), budget=PATIENT)
    assert verdict.passed and verdict.compile_only, (verdict.failure, verdict.compiler_log[-3000:])
    (build,) = verdict.details["builds"]
    assert not build["cached"] and build["seconds"] > 0.5  # really compiled, not a pass of nothing
    if mode == "fast":
        assert build["compiled_units"][:3] == ["src0_twice.cu", "src1_helper.cu", "src2_bind.cpp"]


@needs_nvcc
@pytest.mark.slow
def test_a_syntax_error_in_a_cu_built_by_a_sibling_load_is_a_compile_error_at_its_line(pools, tmp_path):
    cu = _two_file_project(tmp_path)
    broken = TWO_FILE_KERNELS["kernels/twice.cu"].replace("y[i] = scale(x[i]);", "y[i] = scale(x[i])")
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "y[i] = scale(x[i])" in text)
    verdict = pools["fast"].validate(REFERENCE, Candidate.from_source(broken, path=cu), budget=PATIENT)
    assert not verdict.passed and verdict.failure_code == "compile_error", verdict.failure
    error = next(d for d in verdict.diagnostics if d.severity == "error")
    assert error.file == str(cu) and error.line in (line, line + 1), (error, verdict.compiler_log[-2000:])


# ---------------------------------------------------------------- on a GPU: each form runs and is correct

TORCH_LIBRARY_FORM = _module('''
    from torch.utils.cpp_extension import load_inline
    OPS = """
    #include <torch/extension.h>
    torch::Tensor twice(torch::Tensor x);
    TORCH_LIBRARY(dice_argforms, m) { m.def("twice(Tensor x) -> Tensor"); }
    TORCH_LIBRARY_IMPL(dice_argforms, CUDA, m) { m.impl("twice", &twice); }
    """
    library = load_inline(name="twice_ops", cpp_sources=OPS, cuda_sources=KERNEL, is_python_module=False)
''', forward='''

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.ops.dice_argforms.twice(x)
''')


@pytest.fixture(scope="module")
def gpu_pool(tmp_path_factory):
    with ValidatorPool(compile_config=CompileConfig(cache_dir=tmp_path_factory.mktemp("gpu-cache"))) as pool:
        yield pool


@pytest.mark.gpu
@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_correct_on_the_gpu(form, gpu_pool, tmp_path):
    verdict = gpu_pool.validate(REFERENCE, Candidate.from_file(_write(tmp_path, form)), "ide", Budget(timing=False))
    assert verdict.passed and verdict.stage == "correct", (verdict.failure, verdict.compiler_log[-3000:])
    assert "built_in_worker" not in verdict.details  # every extension was found and built before the import


@pytest.mark.gpu
def test_one_file_as_its_own_reference_is_correct_on_the_gpu(gpu_pool, tmp_path):
    path = tmp_path / "model_new.py"
    path.write_text(REFERENCE_WITH_ITS_OWN_EXTENSION)
    verdict = gpu_pool.validate(path, Candidate.from_file(path), "ide", Budget(timing=False))
    assert verdict.passed and verdict.stage == "correct", (verdict.failure, verdict.compiler_log[-3000:])


@pytest.mark.gpu
def test_a_library_loaded_into_torch_ops_is_correct_on_the_gpu(gpu_pool, tmp_path):
    path = tmp_path / "model_new.py"
    path.write_text(TORCH_LIBRARY_FORM)
    verdict = gpu_pool.validate(REFERENCE, Candidate.from_file(path), "ide", Budget(timing=False))
    assert verdict.passed and verdict.stage == "correct", (verdict.failure, verdict.compiler_log[-3000:])


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["ide", "strict"])
def test_a_cu_built_by_a_sibling_load_is_correct_on_the_gpu(policy, gpu_pool, tmp_path):
    verdict = gpu_pool.validate(REFERENCE, Candidate.from_file(_two_file_project(tmp_path)), policy,
                                Budget(timing=False))
    assert verdict.passed and verdict.stage == "correct", (verdict.failure, verdict.compiler_log[-3000:])
