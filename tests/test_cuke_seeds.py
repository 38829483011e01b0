"""The built-in CuKe seed library: every generator yields well-formed, tagged pairs that parse, pass the strict static
checks, mirror the reference's parameters and run as references; strategies, problem-writing styles and code styles
vary; every family has a role for the problem prose; every PyTorch spelling of an op computes the same thing;
renames and reorders keep the program; and (slow) the CUDA sources of every strategy and dtype mode compile with
nvcc; (GPU) they pass the strict validator."""

import ast
import random
import os
import re
import shutil
import types
from collections import Counter

import pytest
import torch

from dice_copilot.trainer.cuke.seeds import GENERATORS, generate_seed_pairs, generator_names
from dice_copilot.trainer.cuke.seeds.codestyle import draw_code_style, rename_identifiers
from dice_copilot.trainer.cuke.seeds.ops import OPS
from dice_copilot.trainer.cuke.seeds.rewrite import reorder_definitions
from dice_copilot.trainer.cuke.seeds.scenarios import fix_articles, role_of
from dice_copilot.trainer.cuke.seeds.writers import MAIN_SPELLINGS, PERSONAS, _fill, draw_writer, rename_python
from dice_copilot.trainer.cuke.textsim import deduplicate

STRATEGIES = {"grid_stride", "thread_per_element", "unrolled_ilp", "vectorized", "half2", "multi_kernel",
              "warp_shuffle", "smem_tree", "cub", "warp_per_row", "online_softmax", "welford", "smem_row_cache",
              "thread_per_output", "block_scan", "cub_scan", "register_tiled_gemm", "smem_tiled_gemm",
              "split_epilogue", "wmma", "direct_conv", "two_stage", "flash_attention", "tiled_transpose",
              "gather_map"}


def _sample(per_generator: int, seed: int = 0) -> list:
    pairs = []
    for name in generator_names():
        gen = generate_seed_pairs(seed=seed, generators=[name], scale=per_generator / GENERATORS[name][1])
        pairs += list(gen)[:per_generator]
    return pairs


@pytest.fixture(scope="module")
def sample():
    return _sample(6)


def test_every_generator_yields_tagged_pairs(sample):
    names = Counter()
    for pair in sample:
        assert pair.families and pair.family == pair.families[0]
        assert pair.level in (1, 2, 3)
        assert pair.composition
        assert pair.dtype in ("fp32", "fp16", "bf16", "int32", "int64")
        assert pair.meta["strategy"] in STRATEGIES, pair.meta
        assert pair.meta["style"] in PERSONAS, pair.meta
        names[pair.uid] += 1
    assert max(names.values()) == 1, "uids must be unique"
    assert len(sample) == 6 * len(GENERATORS)


def test_library_covers_the_required_operator_families():
    pairs = list(generate_seed_pairs(scale=0.12))
    primary = {p.family for p in pairs}
    tags = {t for p in pairs for t in p.families}
    assert len(primary) >= 120, sorted(primary)
    required = {"relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "elu", "hardswish", "softplus", "mish",
                "hardshrink", "softshrink", "celu", "threshold", "exp", "log", "sqrt", "sin", "pow",
                "binary_broadcast", "add", "mul", "div", "lerp", "remainder", "reduce_sum", "reduce_mean",
                "reduce_max", "reduce_min", "reduce_var", "reduce_std", "reduce_logsumexp", "reduce_prod", "argmax",
                "softmax", "log_softmax", "masked_softmax", "layer_norm", "rms_norm", "standardize", "batch_norm",
                "group_norm", "cumsum", "cumprod", "cummin", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
                "matmul_transposed_b", "linear", "bmm", "matvec", "conv1d", "conv2d", "mse_loss", "cross_entropy",
                "nll_loss", "focal_loss", "dice_loss", "smooth_l1_loss", "kl_div", "hinge_loss", "gather",
                "scatter", "index_select", "embedding", "transpose", "permute", "clamp", "where", "l2_normalize",
                "gemm_epilogue", "conv_epilogue", "residual_add", "attention", "mlp", "swiglu", "llm_rmsnorm",
                "rotary_embedding", "causal_softmax", "glu", "geglu", "prelu", "film", "adaptive_modulation",
                "layer_scale", "compare", "bitwise", "integer_arith", "quantize_int8", "dequantize",
                "fake_quantize", "one_hot", "pad", "roll", "flip", "concat", "pixel_shuffle", "upsample_nearest",
                "upsample_bilinear", "channel_shuffle", "triangular_mask", "repeat", "tensor_core"}
    assert required <= tags, sorted(required - tags)
    levels = Counter(p.level for p in pairs)
    assert levels[1] and levels[2] and levels[3]


def test_strategies_styles_and_code_styles_all_occur():
    pairs = list(generate_seed_pairs(scale=0.12))
    strategies = Counter(p.meta["strategy"] for p in pairs)
    assert set(strategies) == STRATEGIES, STRATEGIES - set(strategies)
    assert set(Counter(p.meta["style"] for p in pairs)) == set(PERSONAS)
    for key in ("naming", "comments", "checks", "launch_check", "grid", "dtype_mode", "binding"):
        values = Counter(p.meta["code_style"][key] for p in pairs)
        assert len(values) >= 2 and max(values.values()) < 0.75 * len(pairs), (key, values)
    rewrites = Counter(p.meta.get("rewrite") for p in pairs)
    assert rewrites["restyle"] and rewrites["restyle+reorder"]


def test_strategy_follows_shapes_and_dtypes():
    """half2 only for 16-bit types, wmma only for fp16/bf16 GEMMs, vectorised packs only where rows split evenly."""
    pairs = list(generate_seed_pairs(generators=["activation", "binary_broadcast", "gemm"], scale=0.3))
    for p in pairs:
        if p.meta["strategy"] == "half2":
            assert p.dtype in ("fp16", "bf16") and ("__half2" in p.cuda_code or "bfloat162" in p.cuda_code), p.uid
        if p.meta["strategy"] == "wmma":
            assert p.dtype in ("fp16", "bf16") and "wmma::mma_sync" in p.cuda_code, p.uid
        if p.dtype == "fp32" and "gemm" in p.families:
            assert p.meta["strategy"] != "wmma"
    assert {"wmma", "register_tiled_gemm", "half2", "vectorized"} <= {p.meta["strategy"] for p in pairs}


def test_generation_is_deterministic():
    first = [p.uid for p in generate_seed_pairs(generators=["softmax", "gemm", "layout"], scale=0.02)]
    again = [p.uid for p in generate_seed_pairs(generators=["softmax", "gemm", "layout"], scale=0.02)]
    assert first == again
    other = [p.uid for p in generate_seed_pairs(seed=1, generators=["softmax", "gemm", "layout"], scale=0.02)]
    assert other != first


def test_parallel_generation_and_dedup_decide_as_one_process_does():
    # above the sizes where processes are used; duplicates appended so that the dedup has something to drop
    serial = list(generate_seed_pairs(scale=0.15))
    parallel = list(generate_seed_pairs(scale=0.15, workers=2))
    assert len(serial) >= 2000
    assert [(p.uid, p.cuda_code) for p in parallel] == [(p.uid, p.cuda_code) for p in serial]
    texts = [(p.pytorch_code, p.cuda_code) for p in serial]
    texts += [(problem.replace("1024", "2048"), candidate) for problem, candidate in texts[:40]]
    groups = [p.family for p in serial] + [p.family for p in serial[:40]]
    one, several = deduplicate(texts, groups=groups), deduplicate(texts, groups=groups, workers=2)
    assert len(one.dropped) >= 40
    assert (several.kept, several.dropped) == (one.kept, one.dropped)


def test_unknown_generator_is_an_actionable_error():
    with pytest.raises(ValueError, match="unknown seed generator.*known: activation"):
        list(generate_seed_pairs(generators=["nope"]))


def test_pairs_parse_and_pass_strict_static_checks(sample):
    from dice_copilot.validator import static_checks
    for pair in sample:
        ast.parse(pair.pytorch_code)
        ast.parse(pair.cuda_code)
        findings = static_checks.check_static(pair.cuda_code, "strict", pair.pytorch_code)
        errors = [f for f in findings if f.severity == "error"]
        assert not errors, (pair.uid, errors)
        # an fp32 task is never written with half types (that would be flagged as a precision downgrade)
        assert not [f for f in findings if f.code == "precision_downgrade"], (pair.uid, pair.dtype)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _statements(fn: ast.FunctionDef) -> list[str]:
    """The body's statements, without docstrings and the super().__init__() call (written either way)."""
    return [ast.dump(stmt) for stmt in fn.body if not (isinstance(stmt, ast.Expr) and (
        isinstance(stmt.value, ast.Constant) or "id='super'" in ast.dump(stmt.value)))]


def _is_parameter_free_layer(stmt: str) -> bool:
    """`self.x = nn.ReLU()`-like statements the problem writer adds for a spelling (no parameters, no RNG)."""
    return "attr='Module'" not in stmt and re.search(r"value=Call\(func=Attribute\(value=Name\(id='nn'", stmt) is not None


def test_model_new_creates_the_reference_parameters_identically(sample):
    """ModelNew runs the reference's constructor statements (same parameter names, so the state_dict copy works,
    and the same RNG use), except parameter-free layers the reference only uses to spell an op; same signatures."""
    for pair in sample:
        ref = _class(ast.parse(pair.pytorch_code), "Model")
        new = _class(ast.parse(pair.cuda_code), "ModelNew")
        ref_init, new_init = _method(ref, "__init__"), _method(new, "__init__")
        assert ast.dump(ref_init.args) == ast.dump(new_init.args), pair.uid
        ref_stmts, new_stmts = _statements(ref_init), _statements(new_init)
        extra = [s for s in ref_stmts if s not in new_stmts]
        assert all(_is_parameter_free_layer(s) for s in extra), (pair.uid, extra)
        assert [s for s in ref_stmts if s in new_stmts] == new_stmts, pair.uid
        assert ast.dump(_method(ref, "forward").args) == ast.dump(_method(new, "forward").args), pair.uid


def test_reference_modules_run_on_cpu():
    """Two pairs per generator (different writers): the problem file is a working module."""
    torch.manual_seed(0)
    for pair in _sample(2, seed=5):
        module = types.ModuleType("problem")
        exec(compile(pair.pytorch_code, pair.uid, "exec"), module.__dict__)
        model = module.Model(*module.get_init_inputs()).eval()
        with torch.no_grad():
            out = model(*module.get_inputs())
        outs = out if isinstance(out, tuple) else (out,)
        assert all(isinstance(o, torch.Tensor) and o.numel() > 0 for o in outs), pair.uid


def test_candidates_launch_on_the_current_stream_and_check_inputs(sample):
    for pair in sample:
        assert "c10::cuda::getCurrentCUDAStream()" in pair.cuda_code, pair.uid
        assert "TORCH_CHECK(" in pair.cuda_code and "__global__" in pair.cuda_code, pair.uid
        assert "<<<" in pair.cuda_code and "load_inline(" in pair.cuda_code, pair.uid


# ---------------------------------------------------------------- spellings, names, rewrites


def _run(expr: str, x: torch.Tensor, layers: dict | None = None) -> torch.Tensor:
    import math
    import torch.nn as nn
    import torch.nn.functional as F
    scope = {"torch": torch, "F": F, "nn": nn, "math": math, "x": x}
    return eval(expr, scope)


def test_every_spelling_of_a_pointwise_op_computes_the_same():
    """All PyTorch spellings of each op (F / torch / method / formula / nn layer) agree on random inputs."""
    import torch.nn as nn  # noqa: F401  (layer constructors are evaluated in _run's scope)
    x = torch.randn(4096) * 3
    for variants in OPS.values():
        for op in variants:
            reference = _run(op.spellings[0][1].format(x="x"), x)
            for kind, template in op.spellings[1:]:
                got = _run(template.format(x="x"), x)
                assert torch.allclose(got, reference, atol=1e-5, rtol=1e-5), (op.tag, kind, template)
            if op.layer:
                layer = _run(op.layer, x)
                assert torch.allclose(layer(x), reference, atol=1e-5, rtol=1e-5), (op.tag, op.layer)


def test_every_spelling_of_a_main_op_computes_the_same():
    torch.manual_seed(0)
    a, b = torch.randn(64, 96), torch.randn(64, 96)
    cases = {"softmax": ([a], {"dim": "-1"}), "log_softmax": ([a], {"dim": "-1"}),
             "sum": ([a], {"dim": "-1", "keep": ""}), "mean": ([a], {"dim": "1", "keep": ", keepdim=True"}),
             "amax": ([a], {"dim": "-1", "keep": ""}), "amin": ([a], {"dim": "-1", "keep": ""}),
             "vector_norm": ([a], {"dim": "-1", "keep": ""}), "logsumexp": ([a], {"dim": "-1", "keep": ""}),
             "var": ([a], {"dim": "-1", "keep": ""}), "std": ([a], {"dim": "-1", "keep": ""}),
             "cumsum": ([a], {"dim": "-1"}), "add": ([a, b], {}), "mul": ([a, b], {}), "div": ([a, b.abs() + 1], {}),
             "maximum": ([a, b], {}), "lerp": ([a, b], {"w": "0.3"}), "scaled_add": ([a, b], {"w": "0.5"}),
             "remainder": ([a, b.abs() + 0.5], {}), "matmul": ([a, b.T], {}), "mm": ([a, b.T], {}),
             "linear": ([a, b], {}), "masked_fill": ([a, a > 0], {"v": "0.5"}), "where": ([a > b, a, b], {}),
             "tril_mask": ([a], {"k": "0"}), "global_avg_pool": ([a.view(4, 16, 8, 12)], {}),
             "max_pool2d": ([a.view(4, 16, 8, 12)], {"k": "2", "s": "2", "p": "0"})}
    for key, (args, kwargs) in cases.items():
        names = [f"t{i}" for i in range(len(args))]
        results = []
        for kind, template in MAIN_SPELLINGS[key]:
            if kind == "nn":
                layer = eval(template.format(**kwargs), {"nn": torch.nn})
                results.append((kind, layer(args[0])))
                continue
            expr = _fill(template, names, kwargs)
            results.append((kind, eval(expr, {"torch": torch, "F": torch.nn.functional, **dict(zip(names, args))})))
        for kind, value in results[1:]:
            assert torch.allclose(value.float(), results[0][1].float(), atol=1e-5), (key, kind)


def test_every_family_has_a_role_for_the_problem_prose(sample):
    """The docstrings say what a module does inside a model through its family's role (scenarios.py)."""
    assert not sorted({p.family for p in sample if role_of(p.family) is None})


def test_prose_articles_agree_with_the_next_word():
    assert fix_articles("a ECAPA-style encoder, a U-Net, a int8 model, an CRNN, A x-vector net") == \
        "an ECAPA-style encoder, a U-Net, an int8 model, a CRNN, An x-vector net"


def test_python_renames_leave_strings_attributes_and_keywords():
    code = 'x = F.softmax(x, dim=-1)\nself.register_buffer("x", x)\ny = self.x + x  # x'
    out = rename_python(code, {"x": "hidden", "dim": "width"})
    assert out == 'hidden = F.softmax(hidden, dim=-1)\nself.register_buffer("x", hidden)\ny = self.x + hidden  # x'


def test_fill_parenthesises_operands_where_precedence_needs_it():
    assert _fill("{0}.relu()", ["a + b"], {}) == "(a + b).relu()"
    assert _fill("torch.relu({0})", ["a + b"], {}) == "torch.relu(a + b)"
    assert _fill("{0} * {1}", ["a - b", "c"], {}) == "(a - b) * c"
    writer = draw_writer(random.Random(0), "formula")
    text = writer.resolve("h = " + "«linear¦a¦w» * «linear¦b¦w»")
    assert "(" in text.split("*")[1] or "F.linear" in text.split("*")[1]


def test_cuda_renames_keep_members_comments_and_the_program_shape():
    source = ('struct alignas(16) Pack { float elems[4]; };\n'
              '__global__ void k(const float* x, float* out, int64_t n) {\n'
              '    // every row is one block, the first thread writes\n'
              '    const int64_t row = blockIdx.x;\n'
              '    Pack p; p.elems[0] = x[row]; out[row] = p.elems[0] + (float)n;\n'
              '    TORCH_CHECK(n > 0, "x must be per row");\n}\n')
    style = draw_code_style(random.Random(3), "fp32", ("alias",))
    style.naming = "camel"
    out = rename_identifiers(source, style)
    assert out != source
    assert "// every row is one block, the first thread writes" in out  # prose untouched
    assert "blockIdx.x" in out and ".elems[0]" in out
    assert re.sub(r"\w+", "w", out.replace("blockIdx.x", "")) == re.sub(r"\w+", "w", source.replace("blockIdx.x", ""))


def test_reorders_define_every_name_before_its_use():
    from cuke_nvcc import cuda_source_of
    from dice_copilot.trainer.cuke.seeds.rewrite import _IDENTIFIER, _defines, _items, _preamble_end, _strip

    reordered = 0
    rng = random.Random(0)
    for pair in generate_seed_pairs(generators=["activation", "softmax", "gemm", "loss"], scale=0.05):
        source = cuda_source_of(pair.cuda_code)
        new = reorder_definitions(source, rng)
        if new is None:
            continue
        reordered += 1
        assert sorted(new.split()) == sorted(source.split())  # the same text, other order
        original = _items(source[_preamble_end(source):])
        items = _items(new[_preamble_end(new):])
        first_def = {}
        for k, item in enumerate(original):
            for name in _defines(item):
                first_def.setdefault(name, k)
        position = {item.strip(): k for k, item in enumerate(items)}
        for k, item in enumerate(original):
            used = set(_IDENTIFIER.findall(_strip(item)))
            for name in used:
                if name in first_def and first_def[name] < k:
                    assert position[original[first_def[name]].strip()] < position[item.strip()], (pair.uid, name)
    assert reordered >= 5


def test_rewrites_keep_the_problem_and_change_the_candidate():
    pairs = list(generate_seed_pairs(generators=["activation", "row_norm"], scale=0.3))
    by_uid = {p.uid: p for p in pairs}
    variants = [p for p in pairs if p.meta.get("rewrite_of") in by_uid]
    assert variants
    for v in variants:
        base = by_uid[v.meta["rewrite_of"]]
        assert v.pytorch_code == base.pytorch_code and v.cuda_code != base.cuda_code
        assert v.family == base.family and v.composition == base.composition


# ---------------------------------------------------------------- compile (slow) and validate (GPU)


def _coverage_sample(limit_per_key: int = 1) -> list:
    """Pairs covering every (generator, strategy) and every dtype mode, fp16 / bf16 and rewrites."""
    picks, seen = [], Counter()
    for name in generator_names():
        for pair in generate_seed_pairs(generators=[name], scale=0.25):
            keys = [(name, pair.meta["strategy"]), ("mode", pair.meta["code_style"]["dtype_mode"], pair.dtype),
                    ("rewrite", pair.meta.get("rewrite"), name)]
            if any(seen[k] < limit_per_key for k in keys):
                picks.append(pair)
                for k in keys:
                    seen[k] += 1
    return picks


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_sources_of_every_strategy_and_dtype_mode_compile_with_nvcc(tmp_path):
    from cuke_nvcc import cuda_source_of, nvcc_compile

    picks = _coverage_sample()
    assert len({p.meta["strategy"] for p in picks}) == len(STRATEGIES)
    if os.environ.get("DICE_CUKE_COMPILE_ALL") != "1":
        # In CI one pair of each strategy (one nvcc call); DICE_CUKE_COMPILE_ALL=1 compiles the whole coverage
        # sample (every generator x strategy, dtype mode x dtype and rewrite kind: about 7 minutes here).
        picks = list({p.meta["strategy"]: p for p in reversed(picks)}.values())
    for start in range(0, len(picks), 60):  # one nvcc call per batch: the torch headers are parsed once
        batch = picks[start:start + 60]
        code, log = nvcc_compile([cuda_source_of(p.cuda_code) for p in batch], tmp_path)
        assert code == 0, log[-4000:]


@pytest.mark.gpu
@pytest.mark.slow
def test_every_strategy_passes_the_strict_validator():
    """One pair per (generator, strategy), dtype mode and rewrite kind: compiled, correct and timed."""
    from dice_copilot.validator import Budget, ValidatorPool

    pairs = _coverage_sample()
    with ValidatorPool() as pool:
        verdicts = pool.validate_many([(p.pytorch_code, p.cuda_code) for p in pairs], policy="strict",
                                      budget=Budget(timing_trials=20))
    failures = [(p.uid, p.meta["strategy"], p.meta["code_style"]["dtype_mode"], v.failure_code, (v.failure or "")[:300])
                for p, v in zip(pairs, verdicts) if not v.passed]
    for failure in failures:
        print("FAILED", *failure)
    by_strategy = Counter(p.meta["strategy"] for p, v in zip(pairs, verdicts) if v.passed)
    print("passed per strategy:", dict(by_strategy))
    assert len(failures) <= len(pairs) // 20, failures
