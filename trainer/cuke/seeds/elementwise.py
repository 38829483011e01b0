"""Elementwise families. Each activation is a family of its own, written with the context it usually has in a
model (a bias or an affine map in front, a scale, residual or gate after it, a clamp), since a kernel pays off when
it fuses several eager ops; random activation chains; binary ops with broadcasting (each op its own family); clamps
and selects; and math functions (exp, sin, log, sqrt, pow, ...) in the forms people write them. Kernels come from
the pointwise builder in the strategy that suits the shape and dtype."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .ops import ACTIVATIONS, OPS, cf, chain_doc, chain_signature, chain_stem, chain_tags, pick, random_chain, spelled
from .pointwise import Load, PointwiseSpec, build_pointwise, choose_strategy
from .render import BF16, FP16, FP32, CandidateSpec, DType, ProblemSpec, SeedPair, make_pair, tensor_input

SHAPES_2D = [(4096, 1024), (2048, 2048), (1024, 4096), (512, 8192), (8192, 512), (256, 16384), (16384, 256),
             (1000, 1000), (3000, 777), (4096, 768), (2048, 1536), (8192, 1000)]
SHAPES_3D = [(64, 128, 512), (32, 256, 256), (128, 64, 1024), (16, 512, 384), (8, 1024, 768), (50, 100, 333),
             (16, 197, 768), (32, 77, 512), (4, 2048, 512), (8, 256, 1024)]


def pick_dtype(rng: random.Random, half_share: float = 0.35) -> DType:
    r = rng.random()
    if r < half_share / 2:
        return FP16
    if r < half_share:
        return BF16
    return FP32


def pick_shape(rng: random.Random) -> tuple[list[str], dict[str, int]]:
    """Size-constant names and values for a 2-D or 3-D tensor."""
    if rng.random() < 0.55:
        b, d = rng.choice(SHAPES_2D)
        return ["batch_size", "dim"], {"batch_size": b, "dim": d}
    b, s, d = rng.choice(SHAPES_3D)
    return ["batch_size", "seq_len", "dim"], {"batch_size": b, "seq_len": s, "dim": d}


def _numel(consts: dict, dims: list[str]) -> int:
    n = 1
    for d in dims:
        n *= int(consts[d])
    return n


def _dt(dtype: DType) -> str:
    return "" if dtype is FP32 else f", dtype={dtype.torch}"


def pointwise_pair(rng: random.Random, spec: PointwiseSpec, problem: ProblemSpec, family: str, families: list[str],
                   level: int, composition: str, dtype: str, numel: int, inner: int, call_args: list[str],
                   strategy: str | None = None, **meta) -> SeedPair:
    """Build the kernel for `spec` in a strategy chosen from the shapes and dtype, and the pair around it."""
    strategy = strategy or choose_strategy(rng, spec, numel, inner)
    body, prelude = build_pointwise(spec, strategy, rng)
    candidate = CandidateSpec(stem=spec.stem, cuda_body=body, prelude=prelude, init_params=problem.init_params,
                              init_body=problem.init_body, forward_params=problem.forward_params,
                              forward_body=f"return _ext_.{spec.stem}({', '.join(call_args)})")
    return make_pair(rng, family, families, level, composition, dtype, problem, candidate, strategy, **meta)


# ---------------------------------------------------------------- activations with their usual context

CONTEXTS = ["alone", "affine_in", "bias", "scale_out", "residual", "gated", "bias_residual", "post_clamp",
            "self_gate", "row_scale", "bias_scale"]


def activation_pair(rng: random.Random, op, context: str, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    last = dims[-1]
    s, t = rng.choice((0.5, 2.0, 1.5, 0.1, 3.0)), rng.choice((0.1, -0.5, 1.0, 0.25))
    loads = [Load("x", dtype.name, "same", "a")]
    fwd, body, params, inputs = [], ["float v = a;"], ["x"], [tensor_input(dims, dtype)]
    init_params, init_body, init_inputs, call = [], "", [], ["x.contiguous()"]
    tags, doc = [op.name], op.doc
    clamp = None
    if context in ("bias", "bias_residual", "bias_scale"):
        init_params, init_inputs = [last], [last]
        init_body = f"self.bias = nn.Parameter(0.1 * torch.randn({last}{_dt(dtype)}))"
        loads.append(Load("bias", dtype.name, "row", "b"))
        call.append("self.bias")
        fwd.append("x = x + self.bias")
        body = ["float v = a + b;"]
        tags.append("bias")
        doc = f"bias add followed by {op.doc}"
    if context == "affine_in":
        fwd.append(f"x = x * {s} + {t}")
        body = [f"float v = a * {cf(s)} + {cf(t)};"]
        tags += ["scale", "shift"]
        doc = f"{op.doc} of an affine map of the input (x * {s} + {t})"
    if context == "self_gate":
        fwd.append(f"return x * {spelled(op.tag, 'x')}")
    else:
        fwd.append(f"x = {spelled(op.tag, 'x')}")
    body.append(op.cuda_stmt("v"))
    if context in ("scale_out", "bias_scale"):
        fwd.append(f"x = x * {s}")
        body.append(f"v = v * {cf(s)};")
        tags.append("scale")
        doc += f", scaled by {s}"
    if context in ("residual", "bias_residual"):
        params.append("residual")
        inputs.append(tensor_input(dims, dtype))
        loads.append(Load("residual", dtype.name, "same", "r"))
        call.append("residual.contiguous()")
        fwd.append("return x + residual")
        body.append("v = v + r;")
        tags.append("residual_add")
        doc += " plus a residual"
    elif context == "gated":
        params.append("y")
        inputs.append(tensor_input(dims, dtype))
        loads.append(Load("y", dtype.name, "same", "g"))
        call.append("y.contiguous()")
        fwd.append("return x * y")
        body.append("v = v * g;")
        tags.append("gate")
        doc += " multiplied by a gate tensor"
    elif context == "row_scale":
        params.append("y")
        inputs.append(tensor_input(dims[:-1] + ["1"], dtype, "positive"))
        loads.append(Load("y", dtype.name, "col", "g"))
        call.append("y.contiguous()")
        fwd.append("return x * y")
        body.append("v = v * g;")
        tags += ["gate", "broadcast"]
        doc += " with a per-row scale"
    elif context == "self_gate":
        body.append("v = a * v;")
        tags.append("gate")
        doc = f"x * {op.doc}(x)"
    elif context == "post_clamp":
        clamp = rng.choice(OPS["clamp"])
        fwd += [f"x = {spelled(clamp.tag, 'x')}", "return x"]
        tags.append("clamp")
        doc += f", then {clamp.doc}"
    else:
        fwd.append("return x")
    stem = f"{op.name}_{context}" if context != "alone" else op.name
    spec = PointwiseSpec(stem, loads, body, dtype.name, tail=[clamp] if clamp else [])
    problem = ProblemSpec(doc=doc, init_params=init_params, init_body=init_body, forward_params=params,
                          forward_body="\n".join(fwd), constants=consts, inputs=inputs, init_inputs=init_inputs)
    composition = f"{op.tag}[{context}]" + (f">{clamp.tag}" if clamp else "")
    return pointwise_pair(rng, spec, problem, op.name, tags, 1 if context == "alone" else 2, composition, dtype.name,
                          _numel(consts, dims), int(consts[last]), call)


def gen_activation(rng: random.Random) -> Iterator[SeedPair]:
    """Every activation, mostly inside the context it has in a model (a lone op rarely beats PyTorch)."""
    while True:
        op = pick(rng, rng.choice(ACTIVATIONS))
        context = rng.choices(CONTEXTS, [1.2, 2, 2, 1.5, 2, 1.5, 1.5, 1.2, 1, 1, 1])[0]
        yield activation_pair(rng, op, context, pick_dtype(rng))


def chain_pair(rng: random.Random, chain: list, dtype: DType, affine: bool) -> SeedPair:
    dims, consts = pick_shape(rng)
    s = rng.choice((0.5, 2.0, 0.25, 1.5))
    fwd = [f"x = x * {s}"] if affine else []
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    body = [f"float v = a * {cf(s)};"] if affine else ["float v = a;"]
    stem = "fused_" + chain_stem(chain)
    spec = PointwiseSpec(stem, [Load("x", dtype.name, "same", "a")], body, dtype.name, tail=list(chain))
    doc = ("scaled input, then " if affine else "") + chain_doc(chain)
    problem = ProblemSpec(doc=doc, init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, dtype)], init_inputs=[])
    comp = (f"scale{s}>" if affine else "") + chain_signature(chain)
    return pointwise_pair(rng, spec, problem, "elementwise_chain", chain_tags(chain) + ["elementwise_chain"], 2, comp,
                          dtype.name, _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


def gen_activation_chain(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        chain = random_chain(rng, rng.choice((2, 2, 3, 3, 4)))
        yield chain_pair(rng, chain, pick_dtype(rng), rng.random() < 0.3)


# ---------------------------------------------------------------- binary ops with broadcasting

BINARY_OPS = {
    # op: (forward expression over x and y with «» placeholders, CUDA expression over a and b, y input kind)
    "add": (spelled("add", "x", "y"), "a + b", "randn"),
    "sub": (spelled("sub", "x", "y"), "a - b", "randn"),
    "mul": (spelled("mul", "x", "y"), "a * b", "randn"),
    "div": (spelled("div", "x", "y"), "a / b", "positive"),
    "maximum": (spelled("maximum", "x", "y"), "fmaxf(a, b)", "randn"),
    "minimum": (spelled("minimum", "x", "y"), "fminf(a, b)", "randn"),
    "squared_difference": (spelled("square", "x - y"), "(a - b) * (a - b)", "randn"),
    "sigmoid_gate": ("x * " + spelled("sigmoid", "y"), "a * (1.f / (1.f + expf(-b)))", "randn"),
    "lerp": (spelled("lerp", "x", "y", w="0.3"), "a + 0.3f * (b - a)", "randn"),
    "scaled_add": (spelled("scaled_add", "x", "y", w="0.5"), "a + 0.5f * b", "randn"),
    "hypot": (spelled("hypot", "x", "y"), "hypotf(a, b)", "randn"),
    "atan2": (spelled("atan2", "x", "y"), "atan2f(a, b)", "randn"),
    "fmod": (spelled("fmod", "x", "y"), "fmodf(a, b)", "positive"),
    "remainder": (spelled("remainder", "x", "y"), "remainder_f(a, b)", "positive"),
    "copysign": (spelled("copysign", "x", "y"), "copysignf(a, b)", "randn"),
}
BINARY_DOCS = {"add": "sum", "sub": "difference", "mul": "product", "div": "quotient", "maximum": "elementwise max",
               "minimum": "elementwise min", "squared_difference": "squared difference",
               "sigmoid_gate": "sigmoid-gated product", "lerp": "linear interpolation (weight 0.3)",
               "scaled_add": "x + 0.5 y", "hypot": "hypotenuse", "atan2": "two-argument arctangent",
               "fmod": "C-style remainder", "remainder": "Python-style remainder", "copysign": "copysign"}
# torch.remainder's definition: the C remainder, moved into the divisor's sign.
REMAINDER_BODY = ["float v = fmodf(a, b);", "if (v != 0.f && ((b < 0.f) != (v < 0.f))) v += b;"]
BROADCAST = {"same": lambda dims: dims, "row": lambda dims: dims[-1:], "col": lambda dims: dims[:-1] + ["1"]}
MODE_DOCS = {"same": "same shape", "row": "y broadcast along the rows", "col": "y holding one value per row"}


def binary_pair(rng: random.Random, op_name: str, mode: str, chain: list, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    torch_expr, cuda_expr, y_kind = BINARY_OPS[op_name]
    if op_name in ("fmod", "remainder", "hypot", "atan2", "copysign"):
        dtype = FP32 if dtype is not FP32 and rng.random() < 0.7 else dtype
    fwd = [f"x = {torch_expr}"] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    body = list(REMAINDER_BODY) if op_name == "remainder" else [f"float v = {cuda_expr};"]
    stem = f"{op_name}_{mode}" + ("_" + chain_stem(chain, 2) if chain else "")
    spec = PointwiseSpec(stem, [Load("x", dtype.name, "same", "a"), Load("y", dtype.name, mode, "b")], body,
                         dtype.name, tail=list(chain))
    doc = f"{BINARY_DOCS[op_name]} of two tensors ({MODE_DOCS[mode]})" + (f", then {chain_doc(chain)}" if chain else "")
    problem = ProblemSpec(doc=doc, init_params=[], init_body="", forward_params=["x", "y"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, dtype), tensor_input(BROADCAST[mode](dims), dtype, y_kind)],
                          init_inputs=[])
    tags = [op_name, "binary_broadcast"] + (["broadcast"] if mode != "same" else []) + chain_tags(chain)
    fused = bool(chain) or mode != "same"
    comp = ">".join([f"{op_name}[{mode}]"] + ([chain_signature(chain)] if chain else []))
    return pointwise_pair(rng, spec, problem, op_name, tags, 2 if fused else 1, comp, dtype.name,
                          _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()", "y.contiguous()"])


def gen_binary(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        op_name = rng.choice(list(BINARY_OPS))
        mode = rng.choice(list(BROADCAST))
        chain = random_chain(rng, rng.choice((0, 1, 1, 2, 3)))
        yield binary_pair(rng, op_name, mode, chain, pick_dtype(rng, 0.3))


# ---------------------------------------------------------------- clamps and selects

def clamp_pair(rng: random.Random, dtype: DType) -> SeedPair:
    """A clamp (or hardtanh) inside a chain: its own family for the held-out split."""
    head = rng.choice(OPS["clamp"] + OPS["hardtanh"])
    chain = [head] + random_chain(rng, rng.choice((1, 1, 2)))
    rng.shuffle(chain)
    dims, consts = pick_shape(rng)
    fwd = [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    spec = PointwiseSpec("clamp_" + chain_stem(chain), [Load("x", dtype.name, "same", "a")], ["float v = a;"],
                         dtype.name, tail=chain)
    problem = ProblemSpec(doc=chain_doc(chain), init_params=[], init_body="", forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts, inputs=[tensor_input(dims, dtype)],
                          init_inputs=[])
    return pointwise_pair(rng, spec, problem, head.name, chain_tags(chain) + ["clamp"], 2, chain_signature(chain),
                          dtype.name, _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


WHERE_FORMS = {
    # name: (forward lines, CUDA body, second input, uses a bool mask input)
    "threshold_select": (["return " + spelled("where", "x > {t}", "x", "y")], ["float v = a > {tf} ? a : b;"], True, False),
    "mask_select": (["return " + spelled("where", "mask", "x", "y")], ["float v = m ? a : b;"], True, True),
    "mask_zero": (["return " + spelled("where", "mask", "x", "torch.zeros_like(x)")], ["float v = m ? a : 0.f;"], False, True),
    "sign_select": (["return " + spelled("where", "x * y > 0", "x", "-y")], ["float v = a * b > 0.f ? a : -b;"], True, False),
    "abs_max": (["return " + spelled("where", "x.abs() > y.abs()", "x", "y")], ["float v = fabsf(a) > fabsf(b) ? a : b;"],
                True, False),
}


def where_pair(rng: random.Random, form: str, chain: list, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    lines, body, second, masked = WHERE_FORMS[form]
    t = rng.choice((0.0, 0.5, -0.25, 1.0))
    fwd = [line.format(t=t) for line in lines]
    body = [line.format(tf=cf(t)) for line in body]
    params, inputs = ["x"], [tensor_input(dims, dtype)]
    loads = [Load("x", dtype.name, "same", "a")]
    call = ["x.contiguous()"]
    if second:
        params.append("y")
        inputs.append(tensor_input(dims, dtype))
        loads.append(Load("y", dtype.name, "same", "b"))
        call.append("y.contiguous()")
    if masked:
        params.insert(0, "mask")
        inputs.insert(0, f"torch.rand({', '.join(dims)}) > {rng.choice((0.5, 0.3, 0.7))}")
        loads.insert(0, Load("mask", "bool", "same", "m"))
        call.insert(0, "mask.contiguous()")
        loads = [loads[1], loads[0]] + loads[2:]  # the float tensor first: the output takes its shape
    if chain:
        last = fwd[-1].replace("return ", "x = ", 1)
        fwd = fwd[:-1] + [last] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    spec = PointwiseSpec(f"where_{form}" + ("_" + chain_stem(chain, 2) if chain else ""), loads, body, dtype.name,
                         tail=list(chain))
    order = {load.tensor: k for k, load in enumerate(loads)}
    call = sorted(call, key=lambda c: order[c.split(".")[0]])
    problem = ProblemSpec(doc=f"elementwise select ({form.replace('_', ' ')})" + (f", then {chain_doc(chain)}" if chain else ""),
                          init_params=[], init_body="", forward_params=params, forward_body="\n".join(fwd),
                          constants=consts, inputs=inputs, init_inputs=[])
    tags = ["where"] + (["masked"] if masked else []) + chain_tags(chain)
    comp = f"where[{form}]" + (f">{chain_signature(chain)}" if chain else "")
    return pointwise_pair(rng, spec, problem, "where", tags, 2, comp, dtype.name, _numel(consts, dims),
                          int(consts[dims[-1]]), call)


def gen_clamp_where(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        if rng.random() < 0.45:
            yield clamp_pair(rng, pick_dtype(rng))
        else:
            chain = random_chain(rng, rng.choice((0, 1, 1, 2)))
            yield where_pair(rng, rng.choice(list(WHERE_FORMS)), chain, pick_dtype(rng, 0.3))


# ---------------------------------------------------------------- math functions

MATH_RECIPES = {
    # family: [(forward expression over x, CUDA body defining v from a, doc)]
    "exp": [(spelled("exp", "-x * x"), "float v = expf(-a * a);", "a Gaussian bump exp(-x^2)"),
            (spelled("exp", "x * 0.5") + " - 1.0", "float v = expf(a * 0.5f) - 1.f;", "exp(x / 2) - 1"),
            (spelled("exp", "-x.abs()") + " * x", "float v = expf(-fabsf(a)) * a;", "x * exp(-|x|)")],
    "sin": [(spelled("sin", "x * 30.0"), "float v = sinf(a * 30.f);", "a SIREN-style sine activation sin(30 x)"),
            (spelled("sin", "x") + " + " + spelled("cos", "x"), "float v = sinf(a) + cosf(a);", "sin(x) + cos(x)"),
            (spelled("sin", "x") + " * x", "float v = sinf(a) * a;", "x sin(x)")],
    "cos": [(spelled("cos", "x * 3.0") + " * 0.5 + 0.5", "float v = cosf(a * 3.f) * 0.5f + 0.5f;",
             "a raised cosine 0.5 + 0.5 cos(3 x)"),
            ("1.0 - " + spelled("cos", "x"), "float v = 1.f - cosf(a);", "1 - cos(x)")],
    "erf": [(spelled("erf", "x * 0.7071067811865476"), "float v = erff(a * 0.7071067811865476f);",
             "erf(x / sqrt(2))"),
            ("0.5 * (1.0 + " + spelled("erf", "x / 1.4142135623730951") + ")",
             "float v = 0.5f * (1.f + erff(a / 1.4142135623730951f));", "the standard normal CDF")],
    "atan": [(spelled("atan", "x * 2.0") + " * 0.6366197723675814", "float v = atanf(a * 2.f) * 0.6366197723675814f;",
              "a soft clip (2 / pi) atan(2 x)")],
    "log": [(f"torch.log({spelled('abs', 'x')} + 1e-3)", "float v = logf(fabsf(a) + 1e-3f);", "log(|x| + 1e-3)"),
            (f"torch.log1p({spelled('abs', 'x')})", "float v = log1pf(fabsf(a));", "log1p(|x|)"),
            (f"torch.sign(x) * torch.log1p({spelled('abs', 'x')})",
             "float v = (float)((a > 0.f) - (a < 0.f)) * log1pf(fabsf(a));", "a symmetric log transform")],
    "sqrt": [(f"torch.sqrt({spelled('square', 'x')} + 1e-6)", "float v = sqrtf(a * a + 1e-6f);", "sqrt(x^2 + 1e-6)"),
             (f"torch.sqrt({spelled('abs', 'x')})", "float v = sqrtf(fabsf(a));", "sqrt(|x|)")],
    "rsqrt": [(f"torch.rsqrt({spelled('square', 'x')} + 1.0)", "float v = rsqrtf(a * a + 1.f);", "1 / sqrt(x^2 + 1)"),
              (f"x * torch.rsqrt({spelled('square', 'x')} + 1.0)", "float v = a * rsqrtf(a * a + 1.f);",
               "the inverse square root unit x / sqrt(1 + x^2)")],
    "reciprocal": [(f"torch.reciprocal(1.0 + {spelled('abs', 'x')})", "float v = 1.f / (1.f + fabsf(a));",
                    "1 / (1 + |x|)"),
                   (f"1.0 / (1.0 + {spelled('square', 'x')})", "float v = 1.f / (1.f + a * a);", "a Cauchy kernel")],
    "pow": [(f"torch.pow({spelled('abs', 'x')} + 1.0, 1.5)", "float v = powf(fabsf(a) + 1.f, 1.5f);",
             "(|x| + 1)^1.5"),
            (spelled("cube", "x") + " * 0.1 + x", "float v = a * a * a * 0.1f + a;", "x + 0.1 x^3")],
    "sign": [(spelled("sign", "x") + " * " + spelled("abs", "x") + ".sqrt()",
              "float v = (float)((a > 0.f) - (a < 0.f)) * sqrtf(fabsf(a));", "a signed square root")],
}
# torch evaluates these in fp32 only when the input is fp32; in half precision the intermediate roundings matter
# less than the tolerance for all of them.


def math_pair(rng: random.Random, family: str, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    expr, cuda, doc = rng.choice(MATH_RECIPES[family])
    post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "relu", "tanh", "clamp"])
    fwd = [f"x = {expr}"] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    stem = f"{family}_map" + ("_" + chain_stem(post, 1) if post else "")
    spec = PointwiseSpec(stem, [Load("x", dtype.name, "same", "a")], [cuda], dtype.name, tail=post)
    problem = ProblemSpec(doc=doc + (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x"], forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(dims, dtype)], init_inputs=[])
    comp = f"{family}[{doc}]" + (f">{chain_signature(post)}" if post else "")
    return pointwise_pair(rng, spec, problem, family, [family, "math"] + chain_tags(post), 2, comp, dtype.name,
                          _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


def gen_math(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        yield math_pair(rng, rng.choice(list(MATH_RECIPES)), pick_dtype(rng, 0.25))


GENERATORS = {
    "activation": (gen_activation, 1300),
    "elementwise_chain": (gen_activation_chain, 900),
    "binary_broadcast": (gen_binary, 1000),
    "clamp_where": (gen_clamp_where, 350),
    "math": (gen_math, 500),
}
