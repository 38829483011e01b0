"""Pointwise operators, each written twice: as PyTorch (reference) and as float CUDA (fused epilogues and chains)."""

from __future__ import annotations

import random
from dataclasses import dataclass


def cf(x: float) -> str:
    """A float literal for CUDA source."""
    text = repr(float(x))
    return text + "f" if ("e" in text or "." in text) else text + ".f"


@dataclass(frozen=True)
class UnaryOp:
    """One pointwise op with fixed constants. `torch` and `cuda` are templates over the operand name `{x}`."""

    name: str  # operator family name
    torch: str
    cuda: str
    tag: str  # name with constants, for the composition string
    needs_math: bool = False

    def torch_stmt(self, var: str) -> str:
        return f"{var} = {self.torch.format(x=var)}"

    def cuda_stmt(self, var: str) -> str:
        return f"{var} = {self.cuda.format(x=var)};"


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _ops_catalogue() -> dict[str, list[UnaryOp]]:
    """Every op with the constants it may take; a variant picks one entry per op."""
    ops: dict[str, list[UnaryOp]] = {
        "relu": [UnaryOp("relu", "torch.relu({x})", "fmaxf({x}, 0.f)", "relu")],
        "gelu": [UnaryOp("gelu", "F.gelu({x})", "0.5f * {x} * (1.f + erff({x} * 0.70710678118654752f))", "gelu"),
                 UnaryOp("gelu", 'F.gelu({x}, approximate="tanh")',
                         "0.5f * {x} * (1.f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x})))",
                         "gelu_tanh")],
        "silu": [UnaryOp("silu", "F.silu({x})", "{x} / (1.f + expf(-{x}))", "silu")],
        "sigmoid": [UnaryOp("sigmoid", "torch.sigmoid({x})", "1.f / (1.f + expf(-{x}))", "sigmoid")],
        "tanh": [UnaryOp("tanh", "torch.tanh({x})", "tanhf({x})", "tanh")],
        "hardswish": [UnaryOp("hardswish", "F.hardswish({x})", "{x} * fminf(fmaxf({x} + 3.f, 0.f), 6.f) / 6.f",
                              "hardswish")],
        "hardsigmoid": [UnaryOp("hardsigmoid", "F.hardsigmoid({x})", "fminf(fmaxf({x} + 3.f, 0.f), 6.f) / 6.f",
                                "hardsigmoid")],
        "softplus": [UnaryOp("softplus", "F.softplus({x})", "({x} > 20.f ? {x} : log1pf(expf({x})))", "softplus")],
        "mish": [UnaryOp("mish", "F.mish({x})", "{x} * tanhf({x} > 20.f ? {x} : log1pf(expf({x})))", "mish")],
        "selu": [UnaryOp("selu", "torch.selu({x})",
                         f"{cf(SELU_SCALE)} * ({{x}} > 0.f ? {{x}} : {cf(SELU_ALPHA)} * expm1f({{x}}))", "selu")],
        "softsign": [UnaryOp("softsign", "F.softsign({x})", "{x} / (1.f + fabsf({x}))", "softsign")],
        "logsigmoid": [UnaryOp("logsigmoid", "F.logsigmoid({x})", "(fminf({x}, 0.f) - log1pf(expf(-fabsf({x}))))",
                               "logsigmoid")],
        "tanhshrink": [UnaryOp("tanhshrink", "F.tanhshrink({x})", "({x} - tanhf({x}))", "tanhshrink")],
        "relu6": [UnaryOp("relu6", "F.relu6({x})", "fminf(fmaxf({x}, 0.f), 6.f)", "relu6")],
        "abs": [UnaryOp("abs", "torch.abs({x})", "fabsf({x})", "abs")],
        "square": [UnaryOp("square", "{x} * {x}", "{x} * {x}", "square")],
    }
    ops["leaky_relu"] = [UnaryOp("leaky_relu", f"F.leaky_relu({{x}}, negative_slope={a})",
                                 f"({{x}} > 0.f ? {{x}} : {cf(a)} * {{x}})", f"leaky_relu{a}")
                         for a in (0.01, 0.05, 0.1, 0.2)]
    ops["elu"] = [UnaryOp("elu", f"F.elu({{x}}, alpha={a})", f"({{x}} > 0.f ? {{x}} : {cf(a)} * expm1f({{x}}))",
                          f"elu{a}") for a in (1.0, 0.5)]
    ops["hardtanh"] = [UnaryOp("hardtanh", f"F.hardtanh({{x}}, min_val={lo}, max_val={hi})",
                               f"fminf(fmaxf({{x}}, {cf(lo)}), {cf(hi)})", f"hardtanh{lo}_{hi}")
                       for lo, hi in ((-1.0, 1.0), (-2.0, 2.0), (-0.5, 0.5))]
    ops["clamp"] = [UnaryOp("clamp", f"torch.clamp({{x}}, min={lo}, max={hi})",
                            f"fminf(fmaxf({{x}}, {cf(lo)}), {cf(hi)})", f"clamp{lo}_{hi}")
                    for lo, hi in ((-1.0, 1.0), (0.0, 1.0), (-0.25, 0.75), (-3.0, 3.0))]
    ops["scale"] = [UnaryOp("scale", f"{{x}} * {c}", f"{{x}} * {cf(c)}", f"scale{c}")
                    for c in (0.5, 2.0, 1.5, 0.125, -1.0, 3.0)]
    ops["shift"] = [UnaryOp("shift", f"{{x}} + {c}", f"{{x}} + {cf(c)}", f"shift{c}") for c in (1.0, -0.5, 0.25, 2.0)]
    return ops


OPS = _ops_catalogue()
ACTIVATIONS = [n for n in OPS if n not in ("scale", "shift", "clamp", "abs", "square")]
ALL_OPS = list(OPS)


def pick(rng: random.Random, name: str) -> UnaryOp:
    return rng.choice(OPS[name])


def random_chain(rng: random.Random, length: int, pool: list[str] | None = None) -> list[UnaryOp]:
    """A chain of distinct-family ops (no op repeated back to back)."""
    pool = pool or ALL_OPS
    chain: list[UnaryOp] = []
    while len(chain) < length:
        name = rng.choice(pool)
        if chain and chain[-1].name == name:
            continue
        chain.append(pick(rng, name))
    return chain


def chain_torch(chain: list[UnaryOp], var: str) -> str:
    return "\n".join(op.torch_stmt(var) for op in chain)


def chain_cuda(chain: list[UnaryOp], var: str, indent: int = 4) -> str:
    pad = " " * indent
    return "\n".join(pad + op.cuda_stmt(var) for op in chain)


def chain_tags(chain: list[UnaryOp]) -> list[str]:
    return [op.name for op in chain]


def chain_signature(chain: list[UnaryOp]) -> str:
    return ">".join(op.tag for op in chain)
