"""Loss families, each reduced to a 0-dim tensor in two deterministic stages (per-block partial sums, then one
block summing the partials in a fixed order; no float atomics): pointwise losses (MSE, L1, smooth-L1, Huber,
hinge, BCE-with-logits, soft margin, Poisson and Gaussian NLL, log-cosh, margin ranking, focal), Dice (three sums
at once), and row losses (cross-entropy or NLL of a log-softmax, optional label smoothing; KL divergence; triplet
margin; cosine embedding). The block reductions come in the flavour the pair draws (shuffles, tree, CUB)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .codestyle import MODES_ALL
from .ops import cf, chain_cuda, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .render import (FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cuda_prelude,
                     host_checks, index_checks, make_pair, ptr, tensor_input)
from .rowwise import map_rows, row_mapping, row_threads

FINAL_STAGE = """
// Stage 2: one block sums the partials in a fixed order, so the result is bitwise reproducible.
__global__ void {stem}_final(const float* __restrict__ partial, int parts, elem_t* __restrict__ out, float scale) {{
    float s = 0.f;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = store_f(s * scale);
}}
"""

POINTWISE_LOSS = """
// Stage 1: each block reduces a grid-stride slice of the per-element losses.
__global__ void {stem}_partial({params}, float* __restrict__ partial, int64_t n) {{
    float s = 0.f;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{
{loads}
        s += {elem};
    }}
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}}
{final}
torch::Tensor {stem}({host_params}) {{
{checks}
    const int64_t n = {first}.numel();
    TORCH_CHECK(n > 0, "{stem}: empty input");
{shape_checks}
    const int parts = (int)std::min<int64_t>((n + 1023) / 1024, 1024);
    auto partial = torch::empty({{parts}}, {first}.options().dtype(at::kFloat));
    auto out = torch::empty({{}}, {first}.options());
    auto stream = {stream};
    {stem}_partial<<<parts, {threads}, 0, stream>>>({ptrs}, partial.data_ptr<float>(), n);
{launch_check}
    {stem}_final<<<1, {threads}, 0, stream>>>(partial.data_ptr<float>(), parts, {op}, {scale});
{launch_check}
    return out;
}}
"""

POINTWISE_LOSSES = {
    # name: (forward return over p, t (and w), CUDA per-element expression, inputs (name, kind), doc)
    "mse_loss": ("F.mse_loss(p, t{r})", "(p - t) * (p - t)", [("predictions", "randn"), ("targets", "randn")],
                 "mean squared error"),
    "l1_loss": ("F.l1_loss(p, t{r})", "fabsf(p - t)", [("predictions", "randn"), ("targets", "randn")],
                "mean absolute error"),
    "smooth_l1_loss": ("F.smooth_l1_loss(p, t{r}, beta={beta})",
                       "(fabsf(p - t) < {betaf} ? 0.5f * (p - t) * (p - t) / {betaf} : fabsf(p - t) - 0.5f * {betaf})",
                       [("predictions", "randn"), ("targets", "randn")], "smooth L1 loss (beta {beta})"),
    "huber_loss": ("F.huber_loss(p, t{r}, delta={beta})",
                   "(fabsf(p - t) < {betaf} ? 0.5f * (p - t) * (p - t) : {betaf} * (fabsf(p - t) - 0.5f * {betaf}))",
                   [("predictions", "randn"), ("targets", "randn")], "Huber loss (delta {beta})"),
    "hinge_loss": ("torch.{red}(torch.clamp(1 - p * t, min=0))", "fmaxf(1.f - p * t, 0.f)",
                   [("predictions", "randn"), ("targets", "sign")], "hinge loss on +-1 labels"),
    "bce_with_logits_loss": ("F.binary_cross_entropy_with_logits(p, t{r})",
                             "fmaxf(p, 0.f) - p * t + log1pf(expf(-fabsf(p)))",
                             [("predictions", "randn"), ("targets", "rand")], "binary cross-entropy on logits"),
    "soft_margin_loss": ("F.soft_margin_loss(p, t{r})", "(fmaxf(-t * p, 0.f) + log1pf(expf(-fabsf(t * p))))",
                         [("predictions", "randn"), ("targets", "sign")], "soft margin loss"),
    "poisson_nll_loss": ("F.poisson_nll_loss(p, t{r})", "expf(p) - t * p",
                         [("predictions", "randn"), ("targets", "rate")], "Poisson NLL with log-rate inputs"),
    "gaussian_nll_loss": ("F.gaussian_nll_loss(p, t, w{r})",
                          "0.5f * (logf(fmaxf(w, 1e-6f)) + (p - t) * (p - t) / fmaxf(w, 1e-6f))",
                          [("predictions", "randn"), ("targets", "randn"), ("variance", "variance")],
                          "Gaussian NLL with a predicted variance"),
    "log_cosh_loss": ("torch.{red}(torch.log(torch.cosh(p - t)))", "logf(coshf(p - t))",
                      [("predictions", "randn"), ("targets", "randn")], "log-cosh regression loss"),
    "margin_ranking_loss": ("F.margin_ranking_loss(p, t, w, margin={margin}{r})", "fmaxf(-w * (p - t) + {marginf}, 0.f)",
                            [("predictions", "randn"), ("targets", "randn"), ("labels", "sign")],
                            "margin ranking loss (margin {margin})"),
    "focal_loss": ("{focal}", "{focal_cuda}", [("predictions", "randn"), ("targets", "binary")],
                   "binary focal loss (gamma {gamma}, alpha {alpha})"),
}
FOCAL_TORCH = ("prob = torch.sigmoid(p)\n"
               "ce = F.binary_cross_entropy_with_logits(p, t, reduction=\"none\")\n"
               "p_t = prob * t + (1 - prob) * (1 - t)\n"
               "alpha_t = {alpha} * t + (1 - {alpha}) * (1 - t)\n"
               "return (alpha_t * (1 - p_t) ** {gamma} * ce).{red}()")
FOCAL_CUDA = ("focal_term(p, t)")
FOCAL_HELPER = """
__device__ __forceinline__ float focal_term(float p, float t) {{
    const float prob = 1.f / (1.f + expf(-p));
    const float ce = fmaxf(p, 0.f) - p * t + log1pf(expf(-fabsf(p)));
    const float p_t = prob * t + (1.f - prob) * (1.f - t);
    const float alpha_t = {alphaf} * t + (1.f - {alphaf}) * (1.f - t);
    return alpha_t * powf(1.f - p_t, {gammaf}) * ce;
}}
"""
LOSS_INPUT_KINDS = {
    "randn": "torch.randn({dims}{dt})",
    "rand": "torch.rand({dims}{dt})",
    "sign": "(torch.randint(0, 2, ({dims},)) * 2 - 1).to({dtype})",
    "binary": "torch.randint(0, 2, ({dims},)).to({dtype})",
    "rate": "torch.poisson(torch.rand({dims}) * 4).to({dtype})",
    "variance": "torch.rand({dims}{dt}) + 0.1",
}


def pointwise_loss_pair(rng: random.Random, name: str, pre: list, reduction: str, dtype: DType) -> SeedPair:
    torch_ret, elem, inputs_spec, doc = POINTWISE_LOSSES[name]
    beta, margin = rng.choice((1.0, 0.5, 2.0)), rng.choice((0.0, 0.5, 1.0))
    gamma, alpha = rng.choice((2.0, 1.5, 3.0)), rng.choice((0.25, 0.5))
    n, d = rng.choice([(4096, 1024), (1024, 4096), (16384, 512), (256, 8192), (32768, 64), (2000, 3000)])
    r = "" if reduction == "mean" else f', reduction="{reduction}"'
    names = [nm for nm, _ in inputs_spec]
    local = ["p", "t", "w"][:len(names)]
    fwd = [f"p = {names[0]}"] + [f"p = {spelled(op.tag, 'p')}" for op in pre]
    fwd += [f"{loc} = {nm}" for loc, nm in zip(local[1:], names[1:])]
    if name == "focal_loss":
        fwd += FOCAL_TORCH.format(alpha=alpha, gamma=gamma, red=reduction).split("\n")
    else:
        fwd.append("return " + torch_ret.format(r=r, beta=beta, red=reduction, margin=margin))
    stem = name + ("_" + reduction if reduction != "mean" else "") + ("_pre" if pre else "")
    dims = "batch_size, dim"
    inputs = [LOSS_INPUT_KINDS[kind].format(dims=dims, dt="" if dtype is FP32 else f", dtype={dtype.torch}",
                                            dtype=dtype.torch) for _, kind in inputs_spec]
    kernel_names = ["pred", "target", "third"][:len(names)]
    loads = [f"        float p = load_f(pred[i]);", chain_cuda(pre, "p", 8)]
    loads += [f"        const float {loc} = load_f({kn}[i]);" for loc, kn in zip(local[1:], kernel_names[1:])]
    helper = FOCAL_HELPER.format(alphaf=cf(alpha), gammaf=cf(gamma)) if name == "focal_loss" else ""
    flavour = rng.choices(["warp_shuffle", "smem_tree", "cub"], [3, 2, 2])[0]
    threads = rng.choice((256, 512))
    scale = "1.f / (float)n" if reduction == "mean" else "1.f"
    if name == "gaussian_nll_loss" and reduction == "mean":
        scale = "1.f / (float)n"
    shape_checks = "\n".join(f'    TORCH_CHECK({kn}.sizes() == pred.sizes(), "{stem}: {kn} must match pred");'
                             for kn in kernel_names[1:])
    body = helper + POINTWISE_LOSS.format(
        stem=stem, params=", ".join(f"const elem_t* __restrict__ {kn}" for kn in kernel_names),
        loads="\n".join(line for line in loads if line.strip()),
        elem=elem.format(betaf=cf(beta), marginf=cf(margin), focal_cuda=FOCAL_CUDA) if name != "focal_loss" else FOCAL_CUDA,
        final=FINAL_STAGE.format(stem=stem), host_params=", ".join(f"torch::Tensor {kn}" for kn in kernel_names),
        checks=host_checks(stem, kernel_names, dtype), first="pred", shape_checks=shape_checks, stream=STREAM,
        threads=threads, ptrs=", ".join(ptr(kn) for kn in kernel_names), op=ptr("out", False), scale=scale,
        launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{doc.format(beta=beta, margin=margin, gamma=gamma, alpha=alpha)} ({reduction})" +
                          (f" of predictions passed through {chain_doc(pre)}" if pre else ""),
                          init_params=[], init_body="", forward_params=names, forward_body="\n".join(fwd),
                          constants={"batch_size": n, "dim": d}, inputs=inputs, init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=cuda_prelude(dtype, reductions=flavour,
                                                   block_threads=threads if flavour == "cub" else None, modes=MODES_ALL),
                              init_params=[], init_body="", forward_params=names,
                              forward_body=f"return _ext_.{stem}({', '.join(f'{nm}.contiguous()' for nm in names)})")
    comp = ">".join(filter(None, [chain_signature(pre), f"{name}[{reduction}]"]))
    return make_pair(rng, name, [name, "loss"] + chain_tags(pre), 2 if pre or name == "focal_loss" else 1, comp, dtype,
                     problem, candidate, "two_stage" if flavour == "warp_shuffle" else flavour)


DICE_KERNEL = """
// Dice loss: three sums (sum p*t, sum p, sum t over sigmoid(p)) per block, then one block combines them.
__global__ void {stem}_partial(const elem_t* __restrict__ logits, const elem_t* __restrict__ target,
                               float* __restrict__ partial, int64_t n) {{
    float inter = 0.f, sp = 0.f, st = 0.f;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{
        const float p = 1.f / (1.f + expf(-load_f(logits[i]))), t = load_f(target[i]);
        inter += p * t;
        sp += p;
        st += t;
    }}
    inter = block_sum(inter);
    sp = block_sum(sp);
    st = block_sum(st);
    if (threadIdx.x == 0) {{
        partial[3 * blockIdx.x] = inter;
        partial[3 * blockIdx.x + 1] = sp;
        partial[3 * blockIdx.x + 2] = st;
    }}
}}

__global__ void {stem}_final(const float* __restrict__ partial, int parts, elem_t* __restrict__ out, float smooth) {{
    float inter = 0.f, sp = 0.f, st = 0.f;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) {{
        inter += partial[3 * i];
        sp += partial[3 * i + 1];
        st += partial[3 * i + 2];
    }}
    inter = block_sum(inter);
    sp = block_sum(sp);
    st = block_sum(st);
    if (threadIdx.x == 0) out[0] = store_f(1.f - (2.f * inter + smooth) / (sp + st + smooth));
}}

torch::Tensor {stem}(torch::Tensor logits, torch::Tensor target, double smooth) {{
{checks}
    TORCH_CHECK(logits.sizes() == target.sizes(), "{stem}: logits and target shapes differ");
    const int64_t n = logits.numel();
    TORCH_CHECK(n > 0, "{stem}: empty input");
    const int parts = (int)std::min<int64_t>((n + 1023) / 1024, 1024);
    auto partial = torch::empty({{3 * parts}}, logits.options().dtype(at::kFloat));
    auto out = torch::empty({{}}, logits.options());
    auto stream = {stream};
    {stem}_partial<<<parts, {threads}, 0, stream>>>({lp}, {tp}, partial.data_ptr<float>(), n);
{launch_check}
    {stem}_final<<<1, {threads}, 0, stream>>>(partial.data_ptr<float>(), parts, {op}, (float)smooth);
{launch_check}
    return out;
}}
"""


def dice_pair(rng: random.Random, dtype: DType) -> SeedPair:
    n, c, h, w = rng.choice([(8, 1, 128, 128), (16, 3, 64, 64), (4, 1, 256, 256), (32, 2, 32, 32)])
    smooth = rng.choice((1.0, 1e-5, 0.1))
    fwd = ["prob = torch.sigmoid(logits)", "intersection = (prob * target).sum()",
           "union = prob.sum() + target.sum()", "return 1 - (2 * intersection + self.smooth) / (union + self.smooth)"]
    stem = "dice_loss"
    flavour = rng.choices(["warp_shuffle", "smem_tree", "cub"], [3, 2, 2])[0]
    threads = rng.choice((256, 512))
    body = DICE_KERNEL.format(stem=stem, checks=host_checks(stem, ["logits", "target"], dtype), stream=STREAM,
                              threads=threads, lp=ptr("logits"), tp=ptr("target"), op=ptr("out", False),
                              launch_check=LAUNCH_CHECK)
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    problem = ProblemSpec(doc=f"soft Dice loss of a segmentation mask (smoothing {smooth})", init_params=["smooth"],
                          init_body="self.smooth = smooth", forward_params=["logits", "target"],
                          forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[f"torch.randn(batch_size, channels, height, width{dt})",
                                  f"(torch.rand(batch_size, channels, height, width) > 0.5).to({dtype.torch})"],
                          init_inputs=[repr(smooth)])
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=cuda_prelude(dtype, reductions=flavour,
                                                   block_threads=threads if flavour == "cub" else None, modes=MODES_ALL),
                              init_params=["smooth"], init_body="self.smooth = smooth",
                              forward_params=["logits", "target"],
                              forward_body=f"return _ext_.{stem}(logits.contiguous(), target.contiguous(), self.smooth)")
    return make_pair(rng, "dice_loss", ["dice_loss", "loss", "sigmoid", "reduction"], 2, f"dice_loss[{smooth}]", dtype,
                     problem, candidate, "two_stage" if flavour == "warp_shuffle" else flavour)


ROW_LOSS = """
// Stage 1: one {unit} per row computes that row's loss into partial[row].
__global__ void {stem}_partial({row_params}, float* __restrict__ partial, int64_t rows, int64_t C) {{
    @ROW_SETUP@
    const int64_t base = row * C;
{row_body}
}}
{final}
torch::Tensor {stem}({host_params}) {{
{checks}
    const int64_t rows = {rows_expr}, C = {cols_expr};
    TORCH_CHECK(rows > 0 && C > 0, "{stem}: empty input");
    auto partial = torch::empty({{rows}}, {first}.options().dtype(at::kFloat));
    auto out = torch::empty({{}}, {first}.options());
    auto stream = {stream};
    {stem}_partial<<<{launch}, 0, stream>>>({row_args}, partial.data_ptr<float>(), rows, C);
{launch_check}
    {stem}_final<<<1, {final_threads}, 0, stream>>>(partial.data_ptr<float>(), (int)rows, {op}, {scale});
{launch_check}
    return out;
}}
"""

CROSS_ENTROPY_BODY = """    float m = -INFINITY;
    for (int64_t c = @TID@; c < C; c += @NT@) m = fmaxf(m, load_f(logits[base + c]));
    m = @RMAX@(m);
    float s = 0.f, total = 0.f;
    for (int64_t c = @TID@; c < C; c += @NT@) {{
        const float v = load_f(logits[base + c]);
        s += expf(v - m);
        total += v;
    }}
    s = @RSUM@(s);
    total = @RSUM@(total);
    if (@LEADER@) {{
        const float lse = m + logf(s);
        const float nll = lse - load_f(logits[base + target[row]]);
        partial[row] = {smooth_expr};
    }}"""

KL_BODY = """    float mp = -INFINITY, mq = -INFINITY;
    for (int64_t c = @TID@; c < C; c += @NT@) {
        mp = fmaxf(mp, load_f(p[base + c]));
        mq = fmaxf(mq, load_f(q[base + c]));
    }
    mp = @RMAX@(mp);
    mq = @RMAX@(mq);
    float sp = 0.f, sq = 0.f;
    for (int64_t c = @TID@; c < C; c += @NT@) {
        sp += expf(load_f(p[base + c]) - mp);
        sq += expf(load_f(q[base + c]) - mq);
    }
    const float lse_p = mp + logf(@RSUM@(sp)), lse_q = mq + logf(@RSUM@(sq));
    float kl = 0.f;
    for (int64_t c = @TID@; c < C; c += @NT@) {
        const float log_t = load_f(q[base + c]) - lse_q;
        kl += expf(log_t) * (log_t - (load_f(p[base + c]) - lse_p));
    }
    kl = @RSUM@(kl);
    if (@LEADER@) partial[row] = kl;"""

TRIPLET_BODY = """    float dp = 0.f, dn = 0.f;
    for (int64_t c = @TID@; c < C; c += @NT@) {{
        const float av = load_f(a[base + c]);
        const float u = av - load_f(pos[base + c]) + 1e-6f, w = av - load_f(neg[base + c]) + 1e-6f;
        dp += u * u;
        dn += w * w;
    }}
    dp = @RSUM@(dp);
    dn = @RSUM@(dn);
    if (@LEADER@) partial[row] = fmaxf(sqrtf(dp) - sqrtf(dn) + {margin}, 0.f);"""

COSINE_EMBEDDING_BODY = """    float dot = 0.f, na = 0.f, nb = 0.f;
    for (int64_t c = @TID@; c < C; c += @NT@) {{
        const float u = load_f(a[base + c]), w = load_f(b[base + c]);
        dot += u * w;
        na += u * u;
        nb += w * w;
    }}
    dot = @RSUM@(dot);
    na = @RSUM@(na);
    nb = @RSUM@(nb);
    if (@LEADER@) {{
        const float cosine = dot / sqrtf((na + 1e-12f) * (nb + 1e-12f));
        partial[row] = label[row] > 0 ? 1.f - cosine : fmaxf(cosine - {margin}, 0.f);
    }}"""


def row_loss_pair(rng: random.Random, name: str, dtype: DType) -> SeedPair:
    b, c = rng.choice([(4096, 1000), (1024, 4096), (16384, 128), (512, 32000), (8192, 512), (256, 10000), (8192, 64)])
    consts = {"batch_size": b, "num_classes": c}
    mode, flavour = row_mapping(rng, c)
    threads = row_threads(c) if mode == "block" else rng.choice((128, 256))
    final_threads = threads if flavour == "cub" else 1024
    if name in ("cross_entropy", "nll_loss"):
        ls = rng.choice((0.0, 0.0, 0.1)) if name == "cross_entropy" else 0.0
        if name == "cross_entropy":
            call = "F.cross_entropy(logits, targets" + (f", label_smoothing={ls})" if ls else ")")
            fwd = [f"return {call}"]
        else:
            fwd = [f"log_probs = {spelled('log_softmax', 'logits', dim=-1)}", "return F.nll_loss(log_probs, targets)"]
        fwd_params = ["logits", "targets"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype), "torch.randint(0, num_classes, (batch_size,))"]
        smooth = f"(1.f - {cf(ls)}) * nll + {cf(ls)} * (lse - total / (float)C)" if ls else "nll"
        row_body = CROSS_ENTROPY_BODY.format(smooth_expr=smooth)
        row_params = "const elem_t* __restrict__ logits, const int64_t* __restrict__ target"
        host_params = "torch::Tensor logits, torch::Tensor target"
        checks = host_checks(name, ["logits"], dtype) + "\n" + index_checks(name, ["target"])
        rows_expr, cols_expr, first = "logits.size(0)", "logits.size(1)", "logits"
        row_args = f"{ptr('logits')}, target.data_ptr<int64_t>()"
        call_args = "logits.contiguous(), targets.contiguous()"
        stem = name + ("_smoothed" if ls else "")
        fams = [name, "loss", "log_softmax", "softmax"]
    elif name == "kl_div":
        fwd = [f'return F.kl_div({spelled("log_softmax", "p", dim=-1)}, {spelled("softmax", "q", dim=-1)}, reduction="batchmean")']
        fwd_params = ["p", "q"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype)] * 2
        row_body, stem = KL_BODY, "kl_div_softmax"
        row_params = "const elem_t* __restrict__ p, const elem_t* __restrict__ q"
        host_params = "torch::Tensor p, torch::Tensor q"
        checks = host_checks(stem, ["p", "q"], dtype)
        rows_expr, cols_expr, first = "p.size(0)", "p.size(1)", "p"
        row_args = f"{ptr('p')}, {ptr('q')}"
        call_args = "p.contiguous(), q.contiguous()"
        fams = [name, "loss", "log_softmax", "softmax"]
    elif name == "triplet_margin_loss":
        margin = rng.choice((1.0, 0.5, 2.0))
        fwd = [f"return F.triplet_margin_loss(anchor, positive, negative, margin={margin})"]
        fwd_params = ["anchor", "positive", "negative"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype)] * 3
        row_body, stem = TRIPLET_BODY.format(margin=cf(margin)), "triplet_margin_loss"
        row_params = "const elem_t* __restrict__ a, const elem_t* __restrict__ pos, const elem_t* __restrict__ neg"
        host_params = "torch::Tensor a, torch::Tensor pos, torch::Tensor neg"
        checks = host_checks(stem, ["a", "pos", "neg"], dtype)
        rows_expr, cols_expr, first = "a.size(0)", "a.size(1)", "a"
        row_args = f"{ptr('a')}, {ptr('pos')}, {ptr('neg')}"
        call_args = "anchor.contiguous(), positive.contiguous(), negative.contiguous()"
        fams = [name, "loss", "pairwise_distance"]
    else:  # cosine_embedding_loss
        margin = rng.choice((0.0, 0.2, 0.5))
        fwd = [f"return F.cosine_embedding_loss(x1, x2, labels, margin={margin})"]
        fwd_params = ["x1", "x2", "labels"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype)] * 2 + \
            ["torch.randint(0, 2, (batch_size,)) * 2 - 1"]
        row_body, stem = COSINE_EMBEDDING_BODY.format(margin=cf(margin)), "cosine_embedding_loss"
        row_params = "const elem_t* __restrict__ a, const elem_t* __restrict__ b, const int64_t* __restrict__ label"
        host_params = "torch::Tensor a, torch::Tensor b, torch::Tensor label"
        checks = host_checks(stem, ["a", "b"], dtype) + "\n" + index_checks(stem, ["label"])
        rows_expr, cols_expr, first = "a.size(0)", "a.size(1)", "a"
        row_args = f"{ptr('a')}, {ptr('b')}, label.data_ptr<int64_t>()"
        call_args = "x1.contiguous(), x2.contiguous(), labels.contiguous()"
        fams = [name, "loss", "cosine_similarity"]
    launch = map_rows("@LAUNCH@", mode, threads)
    body = map_rows(ROW_LOSS.format(stem=stem, unit="warp" if mode == "warp" else "block", row_params=row_params,
                                    row_body=row_body, final=FINAL_STAGE.format(stem=stem), host_params=host_params,
                                    checks=checks, rows_expr=rows_expr, cols_expr=cols_expr, first=first,
                                    stream=STREAM, launch=launch, row_args=row_args, final_threads=final_threads,
                                    op=ptr("out", False), scale="1.f / (float)rows", launch_check=LAUNCH_CHECK),
                    mode, threads)
    # the final stage always reduces with a whole block: block helpers are needed whatever the row mapping
    block_flavour = "warp_shuffle" if flavour == "warp_only" else flavour
    problem = ProblemSpec(doc=f"{name.replace('_', ' ')} averaged over the batch", init_params=[], init_body="",
                          forward_params=fwd_params, forward_body="\n".join(fwd), constants=consts, inputs=inputs,
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=cuda_prelude(dtype, reductions=block_flavour,
                                                   block_threads=threads if block_flavour == "cub" else None,
                                                   modes=MODES_ALL),
                              init_params=[], init_body="", forward_params=fwd_params,
                              forward_body=f"return _ext_.{stem}({call_args})")
    fused = name in ("kl_div", "nll_loss", "cosine_embedding_loss") or stem.endswith("smoothed")
    strategy = "warp_per_row" if mode == "warp" else flavour
    return make_pair(rng, name, fams, 2 if fused else 1, stem, dtype, problem, candidate, strategy)


def gen_losses(rng: random.Random) -> Iterator[SeedPair]:
    """fp32 only: a half-precision mean over millions of terms is the same number for any inputs within the fp16
    tolerance, so the validator's other-seed probe would pass and the problem could not tell a real kernel apart."""
    dtype = FP32
    while True:
        r = rng.random()
        if r < 0.62:
            name = rng.choice(list(POINTWISE_LOSSES))
            pre = [] if name in ("focal_loss", "gaussian_nll_loss", "margin_ranking_loss") else \
                random_chain(rng, rng.choice((0, 0, 1)), ["sigmoid", "tanh", "relu", "scale", "softplus"])
            reduction = "mean" if name == "hinge_loss" or rng.random() < 0.75 else "sum"
            yield pointwise_loss_pair(rng, name, pre, reduction, dtype)
        elif r < 0.7:
            yield dice_pair(rng, dtype)
        else:
            yield row_loss_pair(rng, rng.choice(("cross_entropy", "nll_loss", "kl_div", "triplet_margin_loss",
                                                 "cosine_embedding_loss")), dtype)


GENERATORS = {
    "loss": (gen_losses, 650),
}
