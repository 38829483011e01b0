"""Pointwise operators: each has its CUDA expression and the ways people write it in PyTorch (an `F.*` function, a
`torch.*` function, a tensor method, an `nn` layer, a formula written out), which the problem writer picks from.

Generators put ops into forward bodies as placeholders (`«tag|x»`, see `spelled`); the problem writer of the pair
replaces each with one spelling, so one generator's problems come in every writing style."""

from __future__ import annotations

import random
from dataclasses import dataclass


def cf(x: float) -> str:
    """A float literal for CUDA source."""
    text = repr(float(x))
    return text + "f" if ("e" in text or "." in text) else text + ".f"


@dataclass(frozen=True)
class UnaryOp:
    """One pointwise op with fixed constants. `cuda` is a template over `{x}`; `spellings` are (kind, template)
    pairs over `{x}`, kind one of F / torch / method / expr; `layer` an nn constructor with no parameters."""

    name: str  # operator family name
    cuda: str
    tag: str  # name with constants, for the composition string (unique per op variant)
    spellings: tuple[tuple[str, str], ...]
    layer: str | None = None
    doc: str = ""

    @property
    def torch(self) -> str:
        return self.spellings[0][1]

    def torch_stmt(self, var: str) -> str:
        return f"{var} = {spelled(self.tag, var)}"

    def cuda_stmt(self, var: str) -> str:
        return f"{var} = {self.cuda.format(x=var)};"


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _op(name, cuda, tag=None, spellings=(), layer=None, doc=""):
    return UnaryOp(name, cuda, tag or name, tuple(spellings), layer, doc or name.replace("_", " "))


def _ops_catalogue() -> dict[str, list[UnaryOp]]:
    """Every op with the constants it may take; a variant picks one entry per op."""
    ops: dict[str, list[UnaryOp]] = {
        "relu": [_op("relu", "fmaxf({x}, 0.f)", spellings=[
            ("torch", "torch.relu({x})"), ("F", "F.relu({x})"), ("method", "{x}.relu()"),
            ("expr", "{x}.clamp(min=0)"), ("expr", "torch.clamp_min({x}, 0.0)")], layer="nn.ReLU()", doc="ReLU")],
        "gelu": [_op("gelu", "0.5f * {x} * (1.f + erff({x} * 0.70710678118654752f))", spellings=[
            ("F", "F.gelu({x})"), ("torch", "torch.nn.functional.gelu({x})"),
            ("expr", "0.5 * {x} * (1.0 + torch.erf({x} / math.sqrt(2.0)))")], layer="nn.GELU()", doc="GELU"),
                 _op("gelu", "0.5f * {x} * (1.f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x})))",
                     "gelu_tanh", [("F", 'F.gelu({x}, approximate="tanh")'),
                                   ("torch", 'torch.nn.functional.gelu({x}, approximate="tanh")')],
                     layer='nn.GELU(approximate="tanh")', doc="tanh-approximated GELU")],
        "silu": [_op("silu", "{x} / (1.f + expf(-{x}))", spellings=[
            ("F", "F.silu({x})"), ("torch", "torch.nn.functional.silu({x})"), ("expr", "{x} * torch.sigmoid({x})"),
            ("method", "{x} * {x}.sigmoid()")], layer="nn.SiLU()", doc="SiLU (swish)")],
        "sigmoid": [_op("sigmoid", "1.f / (1.f + expf(-{x}))", spellings=[
            ("torch", "torch.sigmoid({x})"), ("method", "{x}.sigmoid()"), ("F", "torch.sigmoid({x})")],
            layer="nn.Sigmoid()", doc="sigmoid")],
        "tanh": [_op("tanh", "tanhf({x})", spellings=[("torch", "torch.tanh({x})"), ("method", "{x}.tanh()")],
                     layer="nn.Tanh()", doc="tanh")],
        "hardswish": [_op("hardswish", "{x} * fminf(fmaxf({x} + 3.f, 0.f), 6.f) / 6.f", spellings=[
            ("F", "F.hardswish({x})"), ("expr", "{x} * F.relu6({x} + 3.0) / 6.0")], layer="nn.Hardswish()",
            doc="hard swish")],
        "hardsigmoid": [_op("hardsigmoid", "fminf(fmaxf({x} + 3.f, 0.f), 6.f) / 6.f", spellings=[
            ("F", "F.hardsigmoid({x})"), ("expr", "F.relu6({x} + 3.0) / 6.0")], layer="nn.Hardsigmoid()",
            doc="hard sigmoid")],
        "softplus": [_op("softplus", "({x} > 20.f ? {x} : log1pf(expf({x})))", spellings=[("F", "F.softplus({x})")],
                         layer="nn.Softplus()", doc="softplus")],
        "mish": [_op("mish", "{x} * tanhf({x} > 20.f ? {x} : log1pf(expf({x})))", spellings=[
            ("F", "F.mish({x})"), ("expr", "{x} * torch.tanh(F.softplus({x}))")], layer="nn.Mish()", doc="Mish")],
        "selu": [_op("selu", f"{cf(SELU_SCALE)} * ({{x}} > 0.f ? {{x}} : {cf(SELU_ALPHA)} * expm1f({{x}}))",
                     spellings=[("torch", "torch.selu({x})"), ("F", "F.selu({x})")], layer="nn.SELU()", doc="SELU")],
        "softsign": [_op("softsign", "{x} / (1.f + fabsf({x}))", spellings=[
            ("F", "F.softsign({x})"), ("expr", "{x} / (1 + {x}.abs())"), ("expr", "{x} / (1.0 + torch.abs({x}))")],
            layer="nn.Softsign()", doc="softsign")],
        "logsigmoid": [_op("logsigmoid", "(fminf({x}, 0.f) - log1pf(expf(-fabsf({x}))))", spellings=[
            ("F", "F.logsigmoid({x})")], layer="nn.LogSigmoid()", doc="log-sigmoid")],
        "tanhshrink": [_op("tanhshrink", "({x} - tanhf({x}))", spellings=[
            ("F", "F.tanhshrink({x})"), ("expr", "{x} - torch.tanh({x})"), ("method", "{x} - {x}.tanh()")],
            layer="nn.Tanhshrink()", doc="tanhshrink")],
        "relu6": [_op("relu6", "fminf(fmaxf({x}, 0.f), 6.f)", spellings=[
            ("F", "F.relu6({x})"), ("torch", "torch.clamp({x}, 0.0, 6.0)"), ("method", "{x}.clamp(0.0, 6.0)")],
            layer="nn.ReLU6()", doc="ReLU6")],
        "abs": [_op("abs", "fabsf({x})", spellings=[("torch", "torch.abs({x})"), ("method", "{x}.abs()")],
                    doc="absolute value")],
        "square": [_op("square", "{x} * {x}", spellings=[
            ("expr", "{x} * {x}"), ("torch", "torch.square({x})"), ("method", "{x}.pow(2)"), ("expr", "{x} ** 2")],
            doc="square")],
        "exp": [_op("exp", "expf({x})", spellings=[("torch", "torch.exp({x})"), ("method", "{x}.exp()")], doc="exp")],
        "sin": [_op("sin", "sinf({x})", spellings=[("torch", "torch.sin({x})"), ("method", "{x}.sin()")], doc="sine")],
        "cos": [_op("cos", "cosf({x})", spellings=[("torch", "torch.cos({x})"), ("method", "{x}.cos()")],
                    doc="cosine")],
        "erf": [_op("erf", "erff({x})", spellings=[("torch", "torch.erf({x})"), ("method", "{x}.erf()"),
                                                   ("torch", "torch.special.erf({x})")], doc="erf")],
        "atan": [_op("atan", "atanf({x})", spellings=[("torch", "torch.atan({x})"), ("method", "{x}.atan()")],
                     doc="arctangent")],
        "cube": [_op("cube", "{x} * {x} * {x}", spellings=[
            ("method", "{x}.pow(3)"), ("expr", "{x} ** 3"), ("torch", "torch.pow({x}, 3)")], doc="cube")],
        "sign": [_op("sign", "(float)(({x} > 0.f) - ({x} < 0.f))", spellings=[
            ("torch", "torch.sign({x})"), ("method", "{x}.sign()")], doc="sign")],
        "neg": [_op("neg", "-{x}", spellings=[("expr", "-{x}"), ("torch", "torch.neg({x})"), ("method", "{x}.neg()")],
                    doc="negation")],
    }
    ops["leaky_relu"] = [_op("leaky_relu", f"({{x}} > 0.f ? {{x}} : {cf(a)} * {{x}})", f"leaky_relu{a}", [
        ("F", f"F.leaky_relu({{x}}, negative_slope={a})"), ("F", f"F.leaky_relu({{x}}, {a})"),
        ("expr", f"torch.where({{x}} > 0, {{x}}, {{x}} * {a})")], f"nn.LeakyReLU({a})", f"leaky ReLU (slope {a})")
        for a in (0.01, 0.05, 0.1, 0.2)]
    ops["elu"] = [_op("elu", f"({{x}} > 0.f ? {{x}} : {cf(a)} * expm1f({{x}}))", f"elu{a}", [
        ("F", f"F.elu({{x}}, alpha={a})")], f"nn.ELU(alpha={a})", f"ELU (alpha {a})") for a in (1.0, 0.5)]
    ops["celu"] = [_op("celu", f"({{x}} > 0.f ? {{x}} : {cf(a)} * expm1f({{x}} / {cf(a)}))", f"celu{a}", [
        ("F", f"F.celu({{x}}, alpha={a})"), ("torch", f"torch.celu({{x}}, alpha={a})")], f"nn.CELU({a})",
        f"CELU (alpha {a})") for a in (1.0, 0.5, 2.0)]
    ops["hardtanh"] = [_op("hardtanh", f"fminf(fmaxf({{x}}, {cf(lo)}), {cf(hi)})", f"hardtanh{lo}_{hi}", [
        ("F", f"F.hardtanh({{x}}, min_val={lo}, max_val={hi})"), ("F", f"F.hardtanh({{x}}, {lo}, {hi})")],
        f"nn.Hardtanh({lo}, {hi})", f"hardtanh to [{lo}, {hi}]") for lo, hi in ((-1.0, 1.0), (-2.0, 2.0), (-0.5, 0.5))]
    ops["clamp"] = [_op("clamp", f"fminf(fmaxf({{x}}, {cf(lo)}), {cf(hi)})", f"clamp{lo}_{hi}", [
        ("torch", f"torch.clamp({{x}}, min={lo}, max={hi})"), ("method", f"{{x}}.clamp({lo}, {hi})"),
        ("torch", f"torch.clip({{x}}, {lo}, {hi})"), ("method", f"{{x}}.clamp(min={lo}, max={hi})")],
        doc=f"clamp to [{lo}, {hi}]") for lo, hi in ((-1.0, 1.0), (0.0, 1.0), (-0.25, 0.75), (-3.0, 3.0))]
    ops["hardshrink"] = [_op("hardshrink", f"(fabsf({{x}}) > {cf(l)} ? {{x}} : 0.f)", f"hardshrink{l}", [
        ("F", f"F.hardshrink({{x}}, lambd={l})"), ("F", f"F.hardshrink({{x}}, {l})")], f"nn.Hardshrink({l})",
        f"hard shrinkage ({l})") for l in (0.5, 0.25, 1.0)]
    ops["softshrink"] = [_op("softshrink",
                             f"({{x}} > {cf(l)} ? {{x}} - {cf(l)} : ({{x}} < {cf(-l)} ? {{x}} + {cf(l)} : 0.f))",
                             f"softshrink{l}", [("F", f"F.softshrink({{x}}, lambd={l})"), ("F", f"F.softshrink({{x}}, {l})")],
                             f"nn.Softshrink({l})", f"soft shrinkage ({l})") for l in (0.5, 0.25, 1.0)]
    ops["threshold"] = [_op("threshold", f"({{x}} > {cf(t)} ? {{x}} : {cf(v)})", f"threshold{t}_{v}", [
        ("F", f"F.threshold({{x}}, {t}, {v})"), ("expr", f"torch.where({{x}} > {t}, {{x}}, torch.full_like({{x}}, {v}))")],
        f"nn.Threshold({t}, {v})", f"threshold at {t} (else {v})") for t, v in ((0.1, 0.0), (0.5, -1.0), (-0.2, 0.0))]
    ops["scale"] = [_op("scale", f"{{x}} * {cf(c)}", f"scale{c}", [
        ("expr", f"{{x}} * {c}"), ("expr", f"{c} * {{x}}"), ("torch", f"torch.mul({{x}}, {c})"),
        ("method", f"{{x}}.mul({c})")], doc=f"scale by {c}") for c in (0.5, 2.0, 1.5, 0.125, -1.0, 3.0)]
    ops["shift"] = [_op("shift", f"{{x}} + {cf(c)}", f"shift{c}", [
        ("expr", f"{{x}} + {c}"), ("torch", f"torch.add({{x}}, {c})"), ("method", f"{{x}}.add({c})")],
        doc=f"add {c}") for c in (1.0, -0.5, 0.25, 2.0)]
    return ops


OPS = _ops_catalogue()
OPS_BY_TAG = {op.tag: op for variants in OPS.values() for op in variants}
# The activations (ops that make a family of their own); scale / shift / clamp-like helpers are context, not families.
ACTIVATIONS = ["relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "softplus", "mish", "selu",
               "softsign", "logsigmoid", "tanhshrink", "relu6", "leaky_relu", "elu", "celu", "hardtanh",
               "hardshrink", "softshrink", "threshold"]
MATH_OPS = ["exp", "sin", "cos", "erf", "atan", "cube", "sign", "neg", "abs", "square"]
# The ops random chains draw from: the classic pointwise set (exp, sin, ... enter through the math family).
CHAIN_OPS = ["relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "softplus", "mish", "selu",
             "softsign", "logsigmoid", "tanhshrink", "relu6", "abs", "square", "leaky_relu", "elu", "hardtanh",
             "clamp", "scale", "shift"]
ALL_OPS = CHAIN_OPS


def pick(rng: random.Random, name: str) -> UnaryOp:
    return rng.choice(OPS[name])


def random_chain(rng: random.Random, length: int, pool: list[str] | None = None) -> list[UnaryOp]:
    """A chain of distinct-family ops (no op repeated back to back)."""
    pool = pool or CHAIN_OPS
    chain: list[UnaryOp] = []
    while len(chain) < length:
        name = rng.choice(pool)
        if chain and chain[-1].name == name:
            continue
        chain.append(pick(rng, name))
    return chain


def spelled(key: str, *args: str, **kwargs) -> str:
    """A placeholder the problem writer resolves (`«key¦arg¦...¦:name=value»`): `key` is an op tag (OPS_BY_TAG) or
    a name of writers.MAIN_SPELLINGS, `args` the operand expressions, `kwargs` the main op's parameters."""
    extra = "".join(f"¦:{k}={v}" for k, v in kwargs.items())
    return f"«{key}¦{'¦'.join(args)}{extra}»"


def chain_torch(chain: list[UnaryOp], var: str) -> str:
    return "\n".join(op.torch_stmt(var) for op in chain)


def chain_cuda(chain: list[UnaryOp], var: str, indent: int = 4) -> str:
    pad = " " * indent
    return "\n".join(pad + op.cuda_stmt(var) for op in chain)


def chain_tags(chain: list[UnaryOp]) -> list[str]:
    return [op.name for op in chain]


def chain_signature(chain: list[UnaryOp]) -> str:
    return ">".join(op.tag for op in chain)


def chain_doc(chain: list[UnaryOp]) -> str:
    return ", then ".join(op.doc for op in chain)


def chain_stem(chain: list[UnaryOp], limit: int = 3) -> str:
    """An identifier naming a chain (`gelu_tanh_scale`), at most `limit` op names."""
    names = [op.name for op in chain[:limit]]
    return "_".join(dict.fromkeys(names)) or "pointwise"
