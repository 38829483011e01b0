"""Gates and learned per-channel scales: GLU and its variants (GEGLU, ReGLU, SwiGLU gates on a chunked last dim),
layer scale with a residual, adaptive modulation (x * (1 + scale) + shift with per-sample vectors), FiLM on feature
maps, PReLU, and per-channel gates. Each is one pointwise kernel whose loads index a broadcast or chunked tensor."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .elementwise import SHAPES_2D, SHAPES_3D, _dt, pick_dtype, pointwise_pair
from .ops import OPS, chain_doc, chain_signature, chain_tags, pick, random_chain, spelled
from .pointwise import Load, PointwiseSpec
from .render import FP32, DType, ProblemSpec, SeedPair, tensor_input
from .writers import draw_writer

GLU_KINDS = {
    # family: (gate op tag or None for sigmoid / identity, forward spellings, doc)
    "glu": ("sigmoid", ["x = F.glu(x, dim=-1)", "a, b = x.chunk(2, dim=-1)\nx = a * {gate_b}"], "gated linear unit"),
    "geglu": ("gelu", ["a, gate = x.chunk(2, dim=-1)\nx = a * {gate_gate}", "a, gate = torch.chunk(x, 2, dim=-1)\nx = a * {gate_gate}"],
              "GEGLU gate (a * gelu(gate))"),
    "reglu": ("relu", ["a, gate = x.chunk(2, dim=-1)\nx = a * {gate_gate}"], "ReGLU gate (a * relu(gate))"),
    "swiglu_gate": ("silu", ["a, gate = x.chunk(2, dim=-1)\nx = {gate_a} * gate", "x1, x2 = x.chunk(2, dim=-1)\nx = {gate_x1} * x2"],
                    "SwiGLU gate (silu(a) * b)"),
}


def glu_pair(rng: random.Random, family: str, post: list, dtype: DType) -> SeedPair:
    b, d = rng.choice([(4096, 2048), (2048, 4096), (8192, 1024), (1024, 8192), (16384, 512), (2048, 5632)])
    gate_tag, forms, doc = GLU_KINDS[family]
    gate = pick(rng, gate_tag)
    form = rng.choice(forms)
    if family == "glu" and "F.glu" in form and rng.random() < 0.3:
        form = "x = self.glu(x)"
    fwd = form.format(gate_b=spelled(gate.tag, "b"), gate_gate=spelled(gate.tag, "gate"),
                      gate_a=spelled(gate.tag, "a"), gate_x1=spelled(gate.tag, "x1")).split("\n")
    init_body = "self.glu = nn.GLU(dim=-1)" if "self.glu" in form else ""
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    # output element i is (row i / half, column i % half); its operands sit at columns c and c + half of that row
    loads = [Load("x", dtype.name, "custom", "a", "(@i / half) * (2 * half) + @i % half"),
             Load("x", dtype.name, "custom", "g", "(@i / half) * (2 * half) + half + @i % half")]
    if family == "swiglu_gate":
        body = ["float s = a;", gate.cuda_stmt("s"), "float v = s * g;"]
    else:
        body = ["float s = g;", gate.cuda_stmt("s"), "float v = a * s;"]
    stem = family + ("_" + post[0].name if post else "")
    spec = PointwiseSpec(stem, loads, body, dtype.name, tail=list(post), sizes=[("half", "x.size(-1) / 2")],
                         out_shape="[&] { auto s = x.sizes().vec(); s.back() /= 2; return s; }()")
    problem = ProblemSpec(doc=doc + (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body=init_body,
                          forward_params=["x"], forward_body="\n".join(fwd), constants={"batch_size": b, "dim": d},
                          inputs=[tensor_input(["batch_size", "dim"], dtype)], init_inputs=[])
    return pointwise_pair(rng, spec, problem, family, [family, "gate", gate.name] + chain_tags(post), 2,
                          f"{family}" + (f">{chain_signature(post)}" if post else ""), dtype.name, b * d // 2, d // 2,
                          ["x.contiguous()"])


def layer_scale_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, t, d = rng.choice(SHAPES_3D)
    init_value = rng.choice((0.1, 0.5, 1.0))  # a tiny gain would make the output the residual within tolerance
    form = rng.choice(["return residual + self.gamma * x", "return x * self.gamma + residual",
                       "return torch.addcmul(residual, x, self.gamma)"])
    init = f"self.gamma = nn.Parameter({init_value} * torch.ones(dim{_dt(dtype)}) + 0.01 * torch.randn(dim{_dt(dtype)}))"
    loads = [Load("x", dtype.name, "same", "a"), Load("gamma", dtype.name, "row", "g"),
             Load("residual", dtype.name, "same", "r")]
    spec = PointwiseSpec("layer_scale_residual", loads, ["float v = r + g * a;"], dtype.name)
    dims = ["batch_size", "seq_len", "dim"]
    problem = ProblemSpec(doc="layer scale (a learned per-channel gain) on a residual branch", init_params=["dim"],
                          init_body=init, forward_params=["x", "residual"], forward_body=form,
                          constants={"batch_size": b, "seq_len": t, "dim": d},
                          inputs=[tensor_input(dims, dtype), tensor_input(dims, dtype)], init_inputs=["dim"])
    return pointwise_pair(rng, spec, problem, "layer_scale", ["layer_scale", "residual_add", "mul"], 2,
                          "layer_scale>residual_add", dtype.name, b * t * d, d,
                          ["x.contiguous()", "self.gamma", "residual.contiguous()"])


def modulation_pair(rng: random.Random, dtype: DType, post: list) -> SeedPair:
    """AdaLN-style modulation: x [B, T, D] with per-sample scale and shift [B, D]."""
    b, t, d = rng.choice([(8, 256, 1024), (16, 197, 768), (32, 64, 512), (4, 1024, 1152), (64, 16, 384)])
    form = rng.choice(["x = x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)",
                       "x = x * (1 + scale[:, None, :]) + shift[:, None, :]",
                       "x = torch.addcmul(shift.unsqueeze(1), x, 1 + scale.unsqueeze(1))"])
    index = "(@i / (T * D)) * D + @i % D"
    loads = [Load("x", dtype.name, "same", "a"), Load("scale", dtype.name, "custom", "s", index),
             Load("shift", dtype.name, "custom", "h", index)]
    spec = PointwiseSpec("adaptive_modulation", loads, ["float v = a * (1.f + s) + h;"], dtype.name, tail=list(post),
                         sizes=[("T", "x.size(1)"), ("D", "x.size(2)")])
    fwd = [form] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    problem = ProblemSpec(doc="adaptive (AdaLN-style) modulation x * (1 + scale) + shift with per-sample vectors" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x", "scale", "shift"], forward_body="\n".join(fwd),
                          constants={"batch_size": b, "seq_len": t, "dim": d},
                          inputs=[tensor_input(["batch_size", "seq_len", "dim"], dtype),
                                  tensor_input(["batch_size", "dim"], dtype), tensor_input(["batch_size", "dim"], dtype)],
                          init_inputs=[])
    return pointwise_pair(rng, spec, problem, "adaptive_modulation", ["adaptive_modulation", "broadcast"] +
                          chain_tags(post), 2, "modulate" + (f">{chain_signature(post)}" if post else ""), dtype.name,
                          b * t * d, d, ["x.contiguous()", "scale.contiguous()", "shift.contiguous()"])


NCHW = [(16, 64, 32, 32), (8, 32, 64, 64), (32, 128, 16, 16), (4, 256, 28, 28), (64, 16, 24, 24), (8, 96, 30, 30)]


def film_pair(rng: random.Random, dtype: DType, post: list) -> SeedPair:
    n, c, h, w = rng.choice(NCHW)
    form = rng.choice(["x = x * gamma[:, :, None, None] + beta[:, :, None, None]",
                       "x = gamma.view(gamma.shape[0], -1, 1, 1) * x + beta.view(beta.shape[0], -1, 1, 1)",
                       "x = x * gamma.unsqueeze(-1).unsqueeze(-1) + beta.unsqueeze(-1).unsqueeze(-1)"])
    loads = [Load("x", dtype.name, "same", "a"), Load("gamma", dtype.name, "custom", "g", "@i / HW"),
             Load("beta", dtype.name, "custom", "bt", "@i / HW")]
    spec = PointwiseSpec("film", loads, ["float v = a * g + bt;"], dtype.name, tail=list(post),
                         sizes=[("HW", "x.size(2) * x.size(3)")])
    fwd = [form] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    dims = ["batch_size", "channels", "height", "width"]
    problem = ProblemSpec(doc="feature-wise linear modulation (FiLM) of a feature map" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x", "gamma", "beta"], forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[tensor_input(dims, dtype), tensor_input(["batch_size", "channels"], dtype),
                                  tensor_input(["batch_size", "channels"], dtype)], init_inputs=[])
    return pointwise_pair(rng, spec, problem, "film", ["film", "broadcast"] + chain_tags(post), 2,
                          "film" + (f">{chain_signature(post)}" if post else ""), dtype.name, n * c * h * w, w,
                          ["x.contiguous()", "gamma.contiguous()", "beta.contiguous()"])


def prelu_pair(rng: random.Random, dtype: DType, post: list) -> SeedPair:
    n, c, h, w = rng.choice(NCHW)
    writer = draw_writer(rng)
    if writer.prefs[0] == "nn" or rng.random() < 0.4:
        init = f"self.act = nn.PReLU(channels{_dt(dtype)})"
        fwd, weight = ["x = self.act(x)"], "self.act.weight"
    else:
        init = f"self.weight = nn.Parameter(0.25 + 0.1 * torch.randn(channels{_dt(dtype)}))"
        fwd, weight = [rng.choice(["x = F.prelu(x, self.weight)", "x = torch.prelu(x, self.weight)",
                                   "x = torch.where(x >= 0, x, self.weight.view(1, -1, 1, 1) * x)"])], "self.weight"
    loads = [Load("x", dtype.name, "same", "a"), Load("weight", dtype.name, "custom", "s", "(@i / HW) % C")]
    spec = PointwiseSpec("prelu" + ("_" + post[0].name if post else ""), loads, ["float v = a >= 0.f ? a : s * a;"],
                         dtype.name, tail=list(post), sizes=[("HW", "x.size(2) * x.size(3)"), ("C", "x.size(1)")])
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    problem = ProblemSpec(doc="PReLU with one learned slope per channel" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=["channels"], init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[tensor_input(["batch_size", "channels", "height", "width"], dtype)],
                          init_inputs=["channels"], writer=writer)
    return pointwise_pair(rng, spec, problem, "prelu", ["prelu", "leaky_relu"] + chain_tags(post), 2 if post else 1,
                          "prelu" + (f">{chain_signature(post)}" if post else ""), dtype.name, n * c * h * w, w,
                          ["x.contiguous()", weight])


def channel_bias_pair(rng: random.Random, dtype: DType) -> SeedPair:
    """A conv-style bias broadcast over H, W, then an activation (what follows a bias-free convolution)."""
    n, c, h, w = rng.choice(NCHW)
    act = pick(rng, rng.choice(["relu", "gelu", "silu", "leaky_relu", "hardswish", "relu6", "mish"]))
    form = rng.choice(["x = x + self.bias.view(1, -1, 1, 1)", "x = x + self.bias[None, :, None, None]",
                       "x = x + self.bias.reshape(1, -1, 1, 1)"])
    fwd = [form, f"x = {spelled(act.tag, 'x')}", "return x"]
    loads = [Load("x", dtype.name, "same", "a"), Load("bias", dtype.name, "custom", "b", "(@i / HW) % C")]
    spec = PointwiseSpec(f"channel_bias_{act.name}", loads, ["float v = a + b;", act.cuda_stmt("v")], dtype.name,
                         sizes=[("HW", "x.size(2) * x.size(3)"), ("C", "x.size(1)")])
    problem = ProblemSpec(doc=f"per-channel bias on a feature map followed by {act.doc}", init_params=["channels"],
                          init_body=f"self.bias = nn.Parameter(0.1 * torch.randn(channels{_dt(dtype)}))",
                          forward_params=["x"], forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[tensor_input(["batch_size", "channels", "height", "width"], dtype)],
                          init_inputs=["channels"])
    return pointwise_pair(rng, spec, problem, "channel_bias", ["channel_bias", "bias", act.name], 2,
                          f"channel_bias>{act.tag}", dtype.name, n * c * h * w, w, ["x.contiguous()", "self.bias"])


def channel_gate_pair(rng: random.Random, dtype: DType) -> SeedPair:
    """The excitation step of a squeeze-and-excitation block: x * sigmoid(s) with s one logit per (sample, channel)."""
    n, c, h, w = rng.choice(NCHW)
    gate = pick(rng, rng.choice(["sigmoid", "hardsigmoid"]))
    form = rng.choice([f"return x * {spelled(gate.tag, 's')}[:, :, None, None]",
                       f"return x * {spelled(gate.tag, 's')}.view(s.shape[0], s.shape[1], 1, 1)"])
    loads = [Load("x", dtype.name, "same", "a"), Load("s", dtype.name, "custom", "g", "@i / HW")]
    spec = PointwiseSpec(f"channel_gate_{gate.name}", loads, ["float v = g;", gate.cuda_stmt("v"), "v = a * v;"],
                         dtype.name, sizes=[("HW", "x.size(2) * x.size(3)")])
    problem = ProblemSpec(doc=f"per-channel {gate.doc} gate (the excitation of a squeeze-and-excitation block)",
                          init_params=[], init_body="", forward_params=["x", "s"], forward_body=form,
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[tensor_input(["batch_size", "channels", "height", "width"], dtype),
                                  tensor_input(["batch_size", "channels"], dtype)], init_inputs=[])
    return pointwise_pair(rng, spec, problem, "channel_gate", ["channel_gate", gate.name, "broadcast"], 2,
                          f"channel_gate[{gate.tag}]", dtype.name, n * c * h * w, w, ["x.contiguous()", "s.contiguous()"])


def gen_gated(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        dtype = pick_dtype(rng, 0.35)
        post = random_chain(rng, rng.choice((0, 0, 1)), ["scale", "shift", "clamp", "tanh", "relu"])
        if r < 0.35:
            yield glu_pair(rng, rng.choice(list(GLU_KINDS)), post, dtype)
        elif r < 0.45:
            yield layer_scale_pair(rng, dtype)
        elif r < 0.57:
            yield modulation_pair(rng, dtype, post)
        elif r < 0.67:
            yield film_pair(rng, dtype, post)
        elif r < 0.8:
            yield prelu_pair(rng, dtype, post)
        elif r < 0.9:
            yield channel_bias_pair(rng, dtype)
        else:
            yield channel_gate_pair(rng, dtype)


GENERATORS = {
    "gated": (gen_gated, 600),
}
