"""Layout families, each one kernel in which every output element works out where it comes from: padding (constant,
reflect, replicate), roll, flip, concatenation, pixel shuffle, nearest and bilinear upsampling, channel shuffle,
triangular masks and repeats, with the pointwise ops that follow them fused in. A lone layout op is a single copy in
PyTorch too; the fused epilogue is what a kernel saves."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .elementwise import _dt, pick_dtype, pointwise_pair
from .ops import cf, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .pointwise import Load, PointwiseSpec
from .render import FP32, DType, ProblemSpec, SeedPair, tensor_input
from .writers import draw_writer

NCHW = [(16, 32, 64, 64), (8, 64, 56, 56), (32, 16, 32, 32), (4, 128, 28, 28), (64, 3, 128, 128), (8, 48, 40, 40)]
ROWS = [(4096, 1024), (2048, 2048), (1024, 4096), (8192, 512), (3000, 777)]
NCHW_DIMS = ["batch_size", "channels", "height", "width"]
# Output element i of an [N, C, OH, OW] result, as coordinates.
NCHW_COORDS = ["const int64_t ow = @i % OW, oh = (@i / OW) % OH;", "const int64_t plane = @i / (OH * OW);"]


def _post(rng: random.Random) -> list:
    return random_chain(rng, rng.choice((1, 1, 2, 0)), ["relu", "gelu", "silu", "scale", "shift", "tanh", "sigmoid",
                                                        "leaky_relu", "hardswish"])


def _pair(rng, stem, loads, body, dtype, post, prologue, sizes, out_shape, problem, family, tags, comp, numel, inner,
          call):
    spec = PointwiseSpec(stem, loads, body, dtype.name, tail=list(post), prologue=prologue, sizes=sizes,
                         out_shape=out_shape)
    return pointwise_pair(rng, spec, problem, family, [family, "layout"] + tags + chain_tags(post), 2 if post else 1,
                          comp + (f">{chain_signature(post)}" if post else ""), dtype.name, numel, inner, call,
                          strategy=rng.choice(["grid_stride", "thread_per_element", "unrolled_ilp"]))


def pad_pair(rng: random.Random, dtype: DType) -> SeedPair:
    n, c, h, w = rng.choice(NCHW)
    left, right, top, bottom = rng.choice([(1, 1, 1, 1), (2, 2, 2, 2), (0, 1, 0, 1), (3, 3, 3, 3), (1, 2, 1, 2)])
    mode = rng.choice(["constant", "constant", "reflect", "replicate"])
    value = rng.choice((0.0, 0.0, -1.0, 0.5)) if mode == "constant" else 0.0
    post = _post(rng)
    writer = draw_writer(rng)
    pads = f"({left}, {right}, {top}, {bottom})"
    layer = {"constant": f"nn.ConstantPad2d({pads}, {value})" if value else f"nn.ZeroPad2d({pads})",
             "reflect": f"nn.ReflectionPad2d({pads})", "replicate": f"nn.ReplicationPad2d({pads})"}[mode]
    init = ""
    if writer.prefs[0] == "nn" or rng.random() < 0.25:
        init, main = f"self.pad = {layer}", "x = self.pad(x)"
    else:
        extra = f', mode="{mode}"' if mode != "constant" else (f", value={value}" if value else "")
        main = f"x = F.pad(x, {pads}{extra})"
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    source = {"constant": ["const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;",
                           "const int64_t src = inside ? (plane * H + ih) * W + iw : 0;"],
              "reflect": ["const int64_t rh = ih < 0 ? -ih : (ih >= H ? 2 * H - 2 - ih : ih);",
                          "const int64_t rw = iw < 0 ? -iw : (iw >= W ? 2 * W - 2 - iw : iw);",
                          "const int64_t src = (plane * H + rh) * W + rw;"],
              "replicate": ["const int64_t src = (plane * H + min(max(ih, (int64_t)0), H - 1)) * W + "
                            "min(max(iw, (int64_t)0), W - 1);"]}[mode]
    prologue = NCHW_COORDS + [f"const int64_t ih = oh - {top}, iw = ow - {left};"] + source
    body = [f"float v = inside ? a : {cf(value)};"] if mode == "constant" else ["float v = a;"]
    sizes = [("H", "x.size(2)"), ("W", "x.size(3)"), ("OH", f"x.size(2) + {top + bottom}"), ("OW", f"x.size(3) + {left + right}")]
    out_shape = f"{{x.size(0), x.size(1), x.size(2) + {top + bottom}, x.size(3) + {left + right}}}"
    problem = ProblemSpec(doc=f"{mode} padding {pads} of a feature map" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=[], init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants=dict(zip(NCHW_DIMS, (n, c, h, w))), inputs=[tensor_input(NCHW_DIMS, dtype)],
                          init_inputs=[], writer=writer)
    oh, ow = h + top + bottom, w + left + right
    return _pair(rng, f"pad_{mode}", [Load("x", dtype.name, "custom", "a", "src")], body, dtype, post, prologue, sizes,
                 out_shape, problem, "pad", [mode], f"pad[{mode},{pads},{value}]", n * c * oh * ow, ow, ["x.contiguous()"])


def roll_flip_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, d = rng.choice(ROWS)
    kind = rng.choice(["roll", "roll", "flip", "flip"])
    post = _post(rng)
    if kind == "roll":
        shift = rng.choice((1, -1, 3, 7, -16, 128))
        main = rng.choice([f"x = torch.roll(x, shifts={shift}, dims=-1)", f"x = x.roll({shift}, dims=1)"])
        prologue = ["const int64_t r = @i / D, j = @i % D;", f"int64_t sj = (j - ({shift})) % D;",
                    "if (sj < 0) sj += D;", "const int64_t src = r * D + sj;"]
        doc, comp = f"circular shift by {shift} along the last dim", f"roll[{shift}]"
    else:
        main = rng.choice(["x = torch.flip(x, dims=[-1])", "x = x.flip(-1)", "x = torch.fliplr(x)"])
        prologue = ["const int64_t r = @i / D, j = @i % D;", "const int64_t src = r * D + (D - 1 - j);"]
        doc, comp = "reversal of the last dim", "flip[-1]"
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    problem = ProblemSpec(doc=doc + (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x"], forward_body="\n".join(fwd), constants={"batch_size": b, "dim": d},
                          inputs=[tensor_input(["batch_size", "dim"], dtype)], init_inputs=[])
    return _pair(rng, kind, [Load("x", dtype.name, "custom", "a", "src")], ["float v = a;"], dtype, post, prologue,
                 [("D", "x.size(-1)")], "x.sizes()", problem, kind, [], comp, b * d, d, ["x.contiguous()"])


def concat_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, d1 = rng.choice(ROWS)
    d2 = rng.choice((d1, d1 // 2, 256, 1000))
    post = _post(rng)
    main = rng.choice(["x = torch.cat([x, y], dim=-1)", "x = torch.cat((x, y), dim=1)", "x = torch.concat([x, y], dim=-1)"])
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    prologue = ["const int64_t r = @i / (D1 + D2), j = @i % (D1 + D2);", "const bool left = j < D1;",
                "const int64_t sx = left ? r * D1 + j : 0, sy = left ? 0 : r * D2 + (j - D1);"]
    loads = [Load("x", dtype.name, "custom", "a", "sx"), Load("y", dtype.name, "custom", "b", "sy")]
    problem = ProblemSpec(doc="concatenation of two tensors along the last dim" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=[], init_body="", forward_params=["x", "y"], forward_body="\n".join(fwd),
                          constants={"batch_size": b, "dim_a": d1, "dim_b": d2},
                          inputs=[tensor_input(["batch_size", "dim_a"], dtype), tensor_input(["batch_size", "dim_b"], dtype)],
                          init_inputs=[])
    return _pair(rng, "concat_last", loads, ["float v = left ? a : b;"], dtype, post, prologue,
                 [("D1", "x.size(1)"), ("D2", "y.size(1)")], "{x.size(0), x.size(1) + y.size(1)}", problem, "concat",
                 [], "cat[-1]", b * (d1 + d2), d1 + d2, ["x.contiguous()", "y.contiguous()"])


def pixel_shuffle_pair(rng: random.Random, dtype: DType) -> SeedPair:
    r = rng.choice((2, 2, 3, 4))
    n, c, h, w = rng.choice([(8, 16, 32, 32), (16, 8, 64, 64), (4, 32, 28, 28), (32, 3, 48, 48)])
    post = _post(rng)
    writer = draw_writer(rng)
    init = ""
    if writer.prefs[0] == "nn" or rng.random() < 0.3:
        init, main = f"self.shuffle = nn.PixelShuffle({r})", "x = self.shuffle(x)"
    else:
        main = rng.choice([f"x = F.pixel_shuffle(x, {r})", f"x = F.pixel_shuffle(x, upscale_factor={r})"])
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    prologue = ["const int64_t ow = @i % OW, oh = (@i / OW) % OH;", "const int64_t co = (@i / (OH * OW)) % C, nb = @i / (OH * OW * C);",
                f"const int64_t ci = co * {r * r} + (oh % {r}) * {r} + ow % {r};",
                f"const int64_t src = ((nb * C * {r * r} + ci) * (OH / {r}) + oh / {r}) * (OW / {r}) + ow / {r};"]
    sizes = [("C", f"x.size(1) / {r * r}"), ("OH", f"x.size(2) * {r}"), ("OW", f"x.size(3) * {r}")]
    problem = ProblemSpec(doc=f"pixel shuffle with upscale factor {r}" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=[], init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c * r * r, "height": h, "width": w},
                          inputs=[tensor_input(NCHW_DIMS, dtype)], init_inputs=[], writer=writer)
    return _pair(rng, "pixel_shuffle", [Load("x", dtype.name, "custom", "a", "src")], ["float v = a;"], dtype, post,
                 prologue, sizes, f"{{x.size(0), x.size(1) / {r * r}, x.size(2) * {r}, x.size(3) * {r}}}", problem,
                 "pixel_shuffle", [], f"pixel_shuffle[{r}]", n * c * h * w * r * r, w * r, ["x.contiguous()"])


def upsample_pair(rng: random.Random, dtype: DType, mode: str) -> SeedPair:
    s = rng.choice((2, 2, 3)) if mode == "nearest" else 2
    n, c, h, w = rng.choice([(8, 32, 32, 32), (16, 16, 28, 28), (4, 64, 40, 40), (32, 8, 16, 16)])
    post = _post(rng)
    writer = draw_writer(rng)
    init = ""
    if writer.prefs[0] == "nn" or rng.random() < 0.3:
        extra = ", align_corners=False" if mode == "bilinear" else ""
        init, main = f'self.up = nn.Upsample(scale_factor={s}, mode="{mode}"{extra})', "x = self.up(x)"
    else:
        extra = ", align_corners=False" if mode == "bilinear" else ""
        main = f'x = F.interpolate(x, scale_factor={s}, mode="{mode}"{extra})'
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    if mode == "nearest":
        prologue = NCHW_COORDS + [f"const int64_t src = (plane * H + oh / {s}) * W + ow / {s};"]
        loads, body = [Load("x", dtype.name, "custom", "a", "src")], ["float v = a;"]
    else:
        # align_corners=False: source coordinate (dst + 0.5) / scale - 0.5, clamped at 0; the right / lower neighbour
        # is the same pixel at the last row and column
        prologue = NCHW_COORDS + [
            f"const float sh = fmaxf((oh + 0.5f) * {cf(1 / s)} - 0.5f, 0.f), sw = fmaxf((ow + 0.5f) * {cf(1 / s)} - 0.5f, 0.f);",
            "const int64_t h0 = (int64_t)sh, w0 = (int64_t)sw;",
            "const int64_t h1 = h0 + (h0 < H - 1), w1 = w0 + (w0 < W - 1);",
            "const float lh = sh - h0, lw = sw - w0;",
            "const int64_t base = plane * H * W;"]
        loads = [Load("x", dtype.name, "custom", "p00", "base + h0 * W + w0"),
                 Load("x", dtype.name, "custom", "p01", "base + h0 * W + w1"),
                 Load("x", dtype.name, "custom", "p10", "base + h1 * W + w0"),
                 Load("x", dtype.name, "custom", "p11", "base + h1 * W + w1")]
        body = ["float v = (1.f - lh) * ((1.f - lw) * p00 + lw * p01) + lh * ((1.f - lw) * p10 + lw * p11);"]
    sizes = [("H", "x.size(2)"), ("W", "x.size(3)"), ("OH", f"x.size(2) * {s}"), ("OW", f"x.size(3) * {s}")]
    problem = ProblemSpec(doc=f"{mode} upsampling by {s}" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=[], init_body=init, forward_params=["x"], forward_body="\n".join(fwd),
                          constants=dict(zip(NCHW_DIMS, (n, c, h, w))), inputs=[tensor_input(NCHW_DIMS, dtype)],
                          init_inputs=[], writer=writer)
    return _pair(rng, f"upsample_{mode}", loads, body, dtype, post, prologue, sizes,
                 f"{{x.size(0), x.size(1), x.size(2) * {s}, x.size(3) * {s}}}", problem, f"upsample_{mode}", [],
                 f"upsample[{mode},{s}]", n * c * h * w * s * s, w * s, ["x.contiguous()"])


def channel_shuffle_pair(rng: random.Random, dtype: DType) -> SeedPair:
    n, c, h, w = rng.choice([(16, 64, 32, 32), (8, 128, 28, 28), (32, 48, 16, 16), (4, 256, 14, 14)])
    g = rng.choice([k for k in (2, 4, 8) if c % k == 0])
    post = _post(rng)
    form = rng.choice([
        ["b, c, h, w = x.shape", "x = x.view(b, self.groups, c // self.groups, h, w)",
         "x = x.transpose(1, 2).contiguous().view(b, c, h, w)"],
        ["b, c, h, w = x.size()", "x = x.reshape(b, self.groups, -1, h, w).permute(0, 2, 1, 3, 4).reshape(b, c, h, w)"],
        ["x = F.channel_shuffle(x, self.groups)"]])
    fwd = form + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    # output channel co = c2 * G + g1 holds input channel g1 * (C / G) + c2
    prologue = ["const int64_t hw = @i % HW, co = (@i / HW) % C, nb = @i / (HW * C);",
                "const int64_t src = (nb * C + (co % G) * (C / G) + co / G) * HW + hw;"]
    problem = ProblemSpec(doc=f"channel shuffle with {g} groups" + (f", then {chain_doc(post)}" if post else ""),
                          init_params=["groups"], init_body="self.groups = groups", forward_params=["x"],
                          forward_body="\n".join(fwd), constants=dict(zip(NCHW_DIMS, (n, c, h, w))),
                          inputs=[tensor_input(NCHW_DIMS, dtype)], init_inputs=[str(g)])
    return _pair(rng, "channel_shuffle", [Load("x", dtype.name, "custom", "a", "src")], ["float v = a;"], dtype, post,
                 prologue, [("HW", "x.size(2) * x.size(3)"), ("C", "x.size(1)"), ("G", str(g))], "x.sizes()", problem,
                 "channel_shuffle", ["permute"], f"channel_shuffle[{g}]", n * c * h * w, w, ["x.contiguous()"])


def triangular_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, t = rng.choice([(32, 256), (16, 512), (64, 128), (8, 1024), (4, 2048)])
    lower = rng.random() < 0.6
    k = rng.choice((0, 0, -1, 1))
    post = _post(rng)
    main = spelled("tril_mask" if lower else "triu_mask", "x", k=k)
    fwd = [f"x = {main}"] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    keep = f"j - r <= {k}" if lower else f"j - r >= {k}"
    prologue = ["const int64_t j = @i % T, r = (@i / T) % T;"]
    name = "tril" if lower else "triu"
    problem = ProblemSpec(doc=f"{'lower' if lower else 'upper'}-triangular part (diagonal {k}) of square matrices" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x"], forward_body="\n".join(fwd), constants={"batch_size": b, "seq_len": t},
                          inputs=[tensor_input(["batch_size", "seq_len", "seq_len"], dtype)], init_inputs=[])
    return _pair(rng, name, [Load("x", dtype.name, "same", "a")], [f"float v = ({keep}) ? a : 0.f;"], dtype, post,
                 prologue, [("T", "x.size(-1)")], "", problem, "triangular_mask", [name], f"{name}[{k}]", b * t * t, t,
                 ["x.contiguous()"])


def repeat_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, d = rng.choice([(4096, 512), (2048, 1024), (8192, 256), (1024, 2048)])
    k = rng.choice((2, 3, 4))
    interleave = rng.random() < 0.5
    post = _post(rng)
    if interleave:
        main = rng.choice([f"x = x.repeat_interleave({k}, dim=-1)", f"x = torch.repeat_interleave(x, {k}, dim=1)"])
        src = f"r * D + j / {k}"
    else:
        main = rng.choice([f"x = x.repeat(1, {k})", f"x = torch.tile(x, (1, {k}))", f"x = torch.cat([x] * {k}, dim=-1)"])
        src = "r * D + j % D"
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in post] + ["return x"]
    prologue = [f"const int64_t r = @i / (D * {k}), j = @i % (D * {k});", f"const int64_t src = {src};"]
    problem = ProblemSpec(doc=("each element repeated" if interleave else "the rows tiled") + f" {k} times along the last dim" +
                          (f", then {chain_doc(post)}" if post else ""), init_params=[], init_body="",
                          forward_params=["x"], forward_body="\n".join(fwd), constants={"batch_size": b, "dim": d},
                          inputs=[tensor_input(["batch_size", "dim"], dtype)], init_inputs=[])
    return _pair(rng, "repeat_interleave" if interleave else "repeat_tile", [Load("x", dtype.name, "custom", "a", "src")],
                 ["float v = a;"], dtype, post, prologue, [("D", "x.size(1)")], f"{{x.size(0), x.size(1) * {k}}}",
                 problem, "repeat", ["repeat_interleave" if interleave else "tile"],
                 f"repeat[{'interleave' if interleave else 'tile'},{k}]", b * d * k, d * k, ["x.contiguous()"])


def gen_layout(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        dtype = pick_dtype(rng, 0.3)
        if r < 0.16:
            yield pad_pair(rng, dtype)
        elif r < 0.3:
            yield roll_flip_pair(rng, dtype)
        elif r < 0.42:
            yield concat_pair(rng, dtype)
        elif r < 0.52:
            yield pixel_shuffle_pair(rng, dtype)
        elif r < 0.6:
            yield upsample_pair(rng, dtype, "nearest")
        elif r < 0.68:
            yield upsample_pair(rng, FP32 if rng.random() < 0.7 else dtype, "bilinear")
        elif r < 0.78:
            yield channel_shuffle_pair(rng, dtype)
        elif r < 0.9:
            yield triangular_pair(rng, dtype)
        else:
            yield repeat_pair(rng, dtype)


GENERATORS = {
    "layout": (gen_layout, 650),
}
