"""Integer and boolean data: comparisons and logical combinations (bool outputs), bitwise ops and index arithmetic on
integer tensors, rounding to integers, int8 quantisation and dequantisation, fake quantisation, and one-hot
encoding. Integer outputs must match exactly, so each kernel performs the reference's own float operations in its
order: a division by a Python float is a multiplication by its float reciprocal in PyTorch's CUDA kernels, and so it
is here."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .elementwise import SHAPES_2D, _numel, pick_dtype, pick_shape, pointwise_pair
from .ops import cf, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .pointwise import Load, PointwiseSpec
from .render import FP32, DType, ProblemSpec, SeedPair, tensor_input

COMPARES = {
    # name: (forward expression, CUDA body, second input, doc)
    "greater": ("x > y", "const bool v = a > b;", True, "x > y"),
    "threshold": ("x > {t}", "const bool v = a > {tf};", False, "x above a threshold"),
    "in_range": ("(x > {lo}) & (x < {hi})", "const bool v = a > {lof} && a < {hif};", False, "x inside an open interval"),
    "logical_and": ("torch.logical_and(x > 0, y > 0)", "const bool v = a > 0.f && b > 0.f;", True,
                    "both inputs positive"),
    "logical_xor": ("torch.logical_xor(x > 0, y < 0)", "const bool v = (a > 0.f) != (b < 0.f);", True,
                    "exactly one of x > 0, y < 0"),
    "abs_greater": ("x.abs() >= y.abs()", "const bool v = fabsf(a) >= fabsf(b);", True, "|x| >= |y|"),
    "sign_match": ("torch.sign(x) == torch.sign(y)", "const bool v = ((a > 0.f) - (a < 0.f)) == ((b > 0.f) - (b < 0.f));",
                   True, "x and y have the same sign"),
    "not_close": ("(x - y).abs() > {t}", "const bool v = fabsf(a - b) > {tf};", True, "x and y differ by more than a margin"),
}


def compare_pair(rng: random.Random, name: str, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    expr, body, second, doc = COMPARES[name]
    # thresholds exact in every dtype, so the comparison does not depend on how the scalar is rounded
    t, lo, hi = rng.choice((0.0, 0.5, 1.0, -0.25)), rng.choice((-1.0, -0.5)), rng.choice((0.5, 1.5))
    if name == "not_close":  # the difference is rounded in the input dtype before the comparison
        dtype = FP32
        t = abs(t) + 0.1
    expr = expr.format(t=t, lo=lo, hi=hi)
    body = body.format(tf=cf(t), lof=cf(lo), hif=cf(hi))
    params, inputs, loads, call = ["x"], [tensor_input(dims, dtype)], [Load("x", dtype.name, "same", "a")], ["x.contiguous()"]
    if second:
        params.append("y")
        inputs.append(tensor_input(dims, dtype))
        loads.append(Load("y", dtype.name, "same", "b"))
        call.append("y.contiguous()")
    spec = PointwiseSpec(f"compare_{name}", loads, [body], "bool", result_type="bool")
    problem = ProblemSpec(doc=f"boolean mask: {doc}", init_params=[], init_body="", forward_params=params,
                          forward_body=f"return {expr}", constants=consts, inputs=inputs, init_inputs=[])
    family = "logical_ops" if name.startswith("logical") else "compare"
    return pointwise_pair(rng, spec, problem, family, [family, "bool"], 2 if second or "&" in expr else 1,
                          f"compare[{name}]", dtype.name, _numel(consts, dims), int(consts[dims[-1]]), call)


def masked_scale_pair(rng: random.Random, dtype: DType) -> SeedPair:
    """A bool mask turned into a float factor: (x > t).to(x.dtype) * y and its spellings."""
    dims, consts = pick_shape(rng)
    t = rng.choice((0.0, 0.25, -0.5))
    form = rng.choice([f"return (x > {t}).to(x.dtype) * y", f"return (x > {t}).float() * y" if dtype is FP32 else
                       f"return (x > {t}).to(y.dtype) * y", f"return y * (x > {t})"])
    spec = PointwiseSpec("mask_scale", [Load("x", dtype.name, "same", "a"), Load("y", dtype.name, "same", "b")],
                         [f"float v = a > {cf(t)} ? b : 0.f;"], dtype.name)
    problem = ProblemSpec(doc=f"y where x > {t}, zero elsewhere (through a float mask)", init_params=[], init_body="",
                          forward_params=["x", "y"], forward_body=form, constants=consts,
                          inputs=[tensor_input(dims, dtype), tensor_input(dims, dtype)], init_inputs=[])
    return pointwise_pair(rng, spec, problem, "compare", ["compare", "mul", "where"], 2, f"mask_scale[{t}]",
                          dtype.name, _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()", "y.contiguous()"])


BITWISE = {
    # name: (forward expression over int32 a, b; CUDA body)
    "and_or_shift": ("(a & b) | (a >> 3)", "const int32_t v = (p & q) | (p >> 3);"),
    "xor": ("a ^ b", "const int32_t v = p ^ q;"),
    "mask_low_bits": ("torch.bitwise_and(a, 0xFF) + torch.bitwise_and(b, 0xF0)", "const int32_t v = (p & 0xFF) + (q & 0xF0);"),
    "shift_xor": ("(a << 2) ^ b", "const int32_t v = (p << 2) ^ q;"),
    "hash_mix": ("(a * 31 + b) ^ (a >> 5)", "const int32_t v = (p * 31 + q) ^ (p >> 5);"),
    "bit_select": ("torch.where((a & 1) == 1, a, b)", "const int32_t v = (p & 1) == 1 ? p : q;"),
}


def bitwise_pair(rng: random.Random, name: str) -> SeedPair:
    dims, consts = pick_shape(rng)
    expr, body = BITWISE[name]
    high = rng.choice((1 << 16, 1 << 20, 1000003))
    inputs = [f"torch.randint(0, {high}, ({', '.join(dims)},), dtype=torch.int32)"] * 2
    spec = PointwiseSpec(f"bitwise_{name}", [Load("a", "int32", "same", "p"), Load("b", "int32", "same", "q")], [body],
                         "int32", result_type="int32_t")
    problem = ProblemSpec(doc=f"integer bit manipulation ({name.replace('_', ' ')}) on int32 tensors", init_params=[],
                          init_body="", forward_params=["a", "b"], forward_body=f"return {expr}", constants=consts,
                          inputs=inputs, init_inputs=[])
    return pointwise_pair(rng, spec, problem, "bitwise", ["bitwise", "integer"], 2, f"bitwise[{name}]", "int32",
                          _numel(consts, dims), int(consts[dims[-1]]), ["a.contiguous()", "b.contiguous()"])


INT_ARITH = {
    # name: (forward expression over int64 a, b (b > 0); CUDA body)
    "mod_hash": ("(a * 1000003 + b) % 65536", "const int64_t v = (p * 1000003 + q) % 65536;"),
    "floor_div": ('torch.div(a, b, rounding_mode="floor")', "const int64_t v = p / q;"),
    "clamp_index": ("torch.clamp(a - b, min=0, max=4095)", "int64_t v = p - q;\nv = v < 0 ? 0 : (v > 4095 ? 4095 : v);"),
    "bucket": ("(a // b) * b + b // 2", "const int64_t v = (p / q) * q + q / 2;"),
}


def int_arith_pair(rng: random.Random, name: str) -> SeedPair:
    dims, consts = pick_shape(rng)
    expr, body = INT_ARITH[name]
    inputs = [f"torch.randint(0, 100000, ({', '.join(dims)},))", f"torch.randint(1, 512, ({', '.join(dims)},))"]
    spec = PointwiseSpec(f"int_{name}", [Load("a", "int64", "same", "p"), Load("b", "int64", "same", "q")],
                         body.split("\n"), "int64", result_type="int64_t")
    problem = ProblemSpec(doc=f"index arithmetic on int64 tensors ({name.replace('_', ' ')}; non-negative operands)",
                          init_params=[], init_body="", forward_params=["a", "b"], forward_body=f"return {expr}",
                          constants=consts, inputs=inputs, init_inputs=[])
    return pointwise_pair(rng, spec, problem, "integer_arith", ["integer_arith", "integer"], 2, f"int[{name}]", "int64",
                          _numel(consts, dims), int(consts[dims[-1]]), ["a.contiguous()", "b.contiguous()"])


def round_pair(rng: random.Random) -> SeedPair:
    """Float -> integer codes: round / floor / trunc of a scaled input (power-of-two scales are exact)."""
    dims, consts = pick_shape(rng)
    scale = rng.choice((4, 8, 16, 0.5))
    kind, dtype = rng.choice([("round", "int32"), ("floor", "int64"), ("trunc", "int32"), ("round", "int64")])
    fn = {"round": "rintf", "floor": "floorf", "trunc": "truncf"}[kind]
    cast = {"int32": rng.choice([".to(torch.int32)", ".int()"]), "int64": rng.choice([".to(torch.int64)", ".long()"])}[dtype]
    expr = f"torch.{kind}(x * {scale}){cast}"
    body = [f"const float v = {fn}(a * {cf(scale)});"]
    spec = PointwiseSpec(f"{kind}_to_{dtype}", [Load("x", "fp32", "same", "a")], body, dtype)
    problem = ProblemSpec(doc=f"{kind} of x * {scale} as {dtype} codes", init_params=[], init_body="",
                          forward_params=["x"], forward_body=f"return {expr}", constants=consts,
                          inputs=[tensor_input(dims, FP32)], init_inputs=[])
    return pointwise_pair(rng, spec, problem, "round", ["round", "integer", "scale"], 2, f"{kind}[{scale}]>{dtype}",
                          "fp32", _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


def quantize_pair(rng: random.Random) -> SeedPair:
    """Symmetric int8 quantisation: clamp(round(x / scale), -128, 127) as int8."""
    dims, consts = pick_shape(rng)
    scale = rng.choice((0.05, 0.02, 0.1, 0.0078125))
    fwd = [f"q = torch.round(x / {scale})", "return torch.clamp(q, -128, 127).to(torch.int8)"]
    if rng.random() < 0.5:
        fwd = [f"q = torch.clamp(torch.round(x / self.scale), -128, 127)", "return q.to(torch.int8)"]
    body = [f"const float inv = 1.f / {cf(scale)};  // x / scale is x * (1 / scale) in PyTorch's CUDA kernel",
            "const float v = fminf(fmaxf(rintf(a * inv), -128.f), 127.f);"]
    spec = PointwiseSpec("quantize_int8", [Load("x", "fp32", "same", "a")], body, "int8")
    problem = ProblemSpec(doc=f"symmetric int8 quantisation with scale {scale}", init_params=["scale"],
                          init_body="self.scale = scale", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, FP32)], init_inputs=[repr(scale)])
    return pointwise_pair(rng, spec, problem, "quantize_int8", ["quantize_int8", "round", "clamp", "integer"], 2,
                          f"quantize_int8[{scale}]", "fp32", _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


def dequantize_pair(rng: random.Random, post: list) -> SeedPair:
    dims, consts = pick_shape(rng)
    scale, zero = rng.choice((0.05, 0.02, 0.1)), rng.choice((0, 3, -8))
    form = rng.choice([f"x = (q.to(torch.float32) - {zero}) * self.scale", f"x = (q.float() - {zero}) * self.scale",
                       f"x = self.scale * (q.float() - {zero})"])
    fwd = [form] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    body = [f"float v = ((float)p - {cf(float(zero))}) * {cf(scale)};"]
    spec = PointwiseSpec("dequantize_int8" + ("_" + post[0].name if post else ""), [Load("q", "int8", "same", "p")],
                         body, "fp32", tail=list(post))
    problem = ProblemSpec(doc=f"int8 dequantisation (scale {scale}, zero point {zero})" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=["scale"],
                          init_body="self.scale = scale", forward_params=["q"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[f"torch.randint(-128, 128, ({', '.join(dims)},), dtype=torch.int8)"],
                          init_inputs=[repr(scale)])
    return pointwise_pair(rng, spec, problem, "dequantize", ["dequantize", "integer"] + chain_tags(post), 2,
                          f"dequantize[{zero}]" + (f">{chain_signature(post)}" if post else ""), "fp32",
                          _numel(consts, dims), int(consts[dims[-1]]), ["q.contiguous()"])


def fake_quantize_pair(rng: random.Random, post: list) -> SeedPair:
    """Quantise-dequantise in float (quantisation-aware training), written out as people do."""
    dims, consts = pick_shape(rng)
    bits = rng.choice((8, 4))
    qmin, qmax = (0, 2 ** bits - 1) if rng.random() < 0.5 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    scale, zero = rng.choice((0.05, 0.1, 0.25)), (2 ** (bits - 1) if qmin == 0 else 0)
    fwd = [f"q = torch.clamp(torch.round(x / self.scale) + {zero}, {qmin}, {qmax})", f"x = (q - {zero}) * self.scale"]
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    body = [f"const float inv = 1.f / {cf(scale)};",
            f"const float q = fminf(fmaxf(rintf(a * inv) + {cf(float(zero))}, {cf(float(qmin))}), {cf(float(qmax))});",
            f"float v = (q - {cf(float(zero))}) * {cf(scale)};"]
    spec = PointwiseSpec("fake_quantize" + ("_" + post[0].name if post else ""), [Load("x", "fp32", "same", "a")], body,
                         "fp32", tail=list(post))
    problem = ProblemSpec(doc=f"{bits}-bit fake quantisation (scale {scale}, range [{qmin}, {qmax}])" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=["scale"],
                          init_body="self.scale = scale", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, FP32)], init_inputs=[repr(scale)])
    return pointwise_pair(rng, spec, problem, "fake_quantize", ["fake_quantize", "round", "clamp"] + chain_tags(post), 2,
                          f"fake_quantize[{bits},{qmin}]" + (f">{chain_signature(post)}" if post else ""), "fp32",
                          _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()"])


def one_hot_pair(rng: random.Random) -> SeedPair:
    n, c = rng.choice([(65536, 10), (16384, 100), (4096, 1000), (131072, 16), (8192, 512)])
    smooth = rng.choice((0.0, 0.1, 0.05))
    scale = 1.0 - smooth
    if smooth:
        fwd = [f"return F.one_hot(labels, num_classes={c}).float() * {scale} + {smooth / c!r}"]
        body = [f"const float v = (k == c ? {cf(scale)} : 0.f) + {cf(smooth / c)};"]
    else:
        fwd = [rng.choice([f"return F.one_hot(labels, num_classes={c}).float()",
                           f"return F.one_hot(labels, {c}).to(torch.float32)"])]
        body = ["const float v = k == c ? 1.f : 0.f;"]
    spec = PointwiseSpec("one_hot" + ("_smoothed" if smooth else ""), [Load("labels", "int64", "custom", "k", "@i / C")],
                         body, "fp32", sizes=[("C", str(c))], out_shape=f"{{labels.size(0), (int64_t){c}}}",
                         prologue=["const int64_t c = @i % C;"])
    problem = ProblemSpec(doc="one-hot encoding of class labels" + (f" with label smoothing {smooth}" if smooth else ""),
                          init_params=[], init_body="", forward_params=["labels"], forward_body="\n".join(fwd),
                          constants={"batch_size": n}, inputs=[f"torch.randint(0, {c}, (batch_size,))"], init_inputs=[])
    return pointwise_pair(rng, spec, problem, "one_hot", ["one_hot", "integer"] + (["scale"] if smooth else []),
                          2 if smooth else 1, f"one_hot[{c}]" + (f">smooth{smooth}" if smooth else ""), "fp32", n * c, c,
                          ["labels.contiguous()"])


def gen_logic(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        if r < 0.25:
            yield compare_pair(rng, rng.choice(list(COMPARES)), pick_dtype(rng, 0.3))
        elif r < 0.32:
            yield masked_scale_pair(rng, pick_dtype(rng, 0.3))
        elif r < 0.45:
            yield bitwise_pair(rng, rng.choice(list(BITWISE)))
        elif r < 0.55:
            yield int_arith_pair(rng, rng.choice(list(INT_ARITH)))
        elif r < 0.64:
            yield round_pair(rng)
        elif r < 0.73:
            yield quantize_pair(rng)
        elif r < 0.82:
            yield dequantize_pair(rng, random_chain(rng, rng.choice((0, 1)), ["relu", "gelu", "silu", "scale"]))
        elif r < 0.92:
            yield fake_quantize_pair(rng, random_chain(rng, rng.choice((0, 0, 1)), ["relu", "scale", "tanh"]))
        else:
            yield one_hot_pair(rng)


GENERATORS = {
    "logic": (gen_logic, 650),
}
