"""Loss families, each reduced to a 0-dim tensor in two deterministic stages (per-block partial sums, then one
block summing the partials in a fixed order): pointwise losses (MSE, L1, smooth-L1, Huber, hinge, BCE-with-logits,
soft margin) and row losses (cross-entropy with optional label smoothing, KL divergence, triplet margin)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .elementwise import pick_dtype
from .ops import cf, chain_cuda, chain_signature, chain_tags, chain_torch, random_chain
from .render import (FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cuda_prelude,
                     host_checks, index_checks, make_pair, ptr, tensor_input)

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
__global__ void {stem}_partial(const elem_t* __restrict__ pred, const elem_t* __restrict__ target,
                               float* __restrict__ partial, int64_t n) {{
    float s = 0.f;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{
        float p = load_f(pred[i]);
{pre}
        const float t = load_f(target[i]);
        s += {elem};
    }}
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}}
{final}
torch::Tensor {stem}(torch::Tensor pred, torch::Tensor target) {{
{checks}
    TORCH_CHECK(pred.sizes() == target.sizes(), "{stem}: pred and target shapes differ");
    const int64_t n = pred.numel();
    TORCH_CHECK(n > 0, "{stem}: empty input");
    const int parts = (int)std::min<int64_t>((n + 1023) / 1024, 1024);
    auto partial = torch::empty({{parts}}, pred.options().dtype(at::kFloat));
    auto out = torch::empty({{}}, pred.options());
    auto stream = {stream};
    {stem}_partial<<<parts, 256, 0, stream>>>({pp}, {tp}, partial.data_ptr<float>(), n);
{launch_check}
    {stem}_final<<<1, 1024, 0, stream>>>(partial.data_ptr<float>(), parts, {op}, {scale});
{launch_check}
    return out;
}}
"""

POINTWISE_LOSSES = {
    # name: (torch call on p, t, cuda per-element expression, target kind)
    "mse_loss": ("F.mse_loss(p, t{r})", "(p - t) * (p - t)", "randn"),
    "l1_loss": ("F.l1_loss(p, t{r})", "fabsf(p - t)", "randn"),
    "smooth_l1_loss": ("F.smooth_l1_loss(p, t{r}, beta={beta})",
                       "(fabsf(p - t) < {betaf} ? 0.5f * (p - t) * (p - t) / {betaf} : fabsf(p - t) - 0.5f * {betaf})",
                       "randn"),
    "huber_loss": ("F.huber_loss(p, t{r}, delta={beta})",
                   "(fabsf(p - t) < {betaf} ? 0.5f * (p - t) * (p - t) : {betaf} * (fabsf(p - t) - 0.5f * {betaf}))",
                   "randn"),
    "hinge_loss": ("torch.{red}(torch.clamp(1 - p * t, min=0))", "fmaxf(1.f - p * t, 0.f)", "sign"),
    "bce_with_logits_loss": ("F.binary_cross_entropy_with_logits(p, t{r})",
                             "fmaxf(p, 0.f) - p * t + log1pf(expf(-fabsf(p)))", "rand"),
    "soft_margin_loss": ("F.soft_margin_loss(p, t{r})",
                         "(fmaxf(-t * p, 0.f) + log1pf(expf(-fabsf(t * p))))", "sign"),
}


def pointwise_loss_pair(rng: random.Random, name: str, pre: list, reduction: str, dtype: DType) -> SeedPair:
    torch_call, elem, t_kind = POINTWISE_LOSSES[name]
    beta = rng.choice((1.0, 0.5, 2.0))
    n, d = rng.choice([(4096, 1024), (1024, 4096), (16384, 512), (256, 8192), (32768, 64), (2000, 3000)])
    r = "" if reduction == "mean" else f', reduction="{reduction}"'
    fwd = ["p = predictions"] + ([chain_torch(pre, "p")] if pre else []) + ["t = targets",
           "return " + torch_call.format(r=r, beta=beta, red=reduction)]
    stem = name + ("_" + reduction if reduction != "mean" else "") + ("_pre" if pre else "")
    if t_kind == "sign":
        t_in = "torch.randint(0, 2, (batch_size, dim)).float() * 2 - 1"
        if dtype is not FP32:
            t_in = f"(torch.randint(0, 2, (batch_size, dim)) * 2 - 1).to({dtype.torch})"
    else:
        t_in = tensor_input(["batch_size", "dim"], dtype, t_kind)
    scale = "1.f / (float)n" if reduction == "mean" else "1.f"
    body = POINTWISE_LOSS.format(stem=stem, pre=chain_cuda(pre, "p", 8),
                                 elem=elem.format(betaf=cf(beta)), final=FINAL_STAGE.format(stem=stem),
                                 checks=host_checks(stem, ["pred", "target"], dtype), stream=STREAM, pp=ptr("pred"),
                                 tp=ptr("target"), op=ptr("out", False), scale=scale, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{name} ({reduction})" + (" of transformed predictions." if pre else "."),
                          init_params=[], init_body="", forward_params=["predictions", "targets"],
                          forward_body="\n".join(fwd), constants={"batch_size": n, "dim": d},
                          inputs=[tensor_input(["batch_size", "dim"], dtype), t_in], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                              signature=f"torch::Tensor {stem}(torch::Tensor pred, torch::Tensor target)",
                              init_params=[], init_body="", forward_params=["predictions", "targets"],
                              forward_body=f"return {stem}_ext.{stem}(predictions.contiguous(), targets.contiguous())")
    comp = ">".join(filter(None, [chain_signature(pre), f"{name}[{reduction}]"]))
    return make_pair(name, [name, "loss"] + chain_tags(pre), 2 if pre else 1, comp, dtype, problem, candidate)


ROW_LOSS = """
// Stage 1: one block per row computes that row's loss into partial[row].
__global__ void {stem}_partial({row_params}, float* __restrict__ partial, int64_t C) {{
    const int64_t row = blockIdx.x, base = row * C;
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
    {stem}_partial<<<(unsigned)rows, {threads}, 0, stream>>>({row_args}, partial.data_ptr<float>(), C);
{launch_check}
    {stem}_final<<<1, 1024, 0, stream>>>(partial.data_ptr<float>(), (int)rows, {op}, {scale});
{launch_check}
    return out;
}}
"""

CROSS_ENTROPY_BODY = """    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, load_f(logits[base + c]));
    m = block_max(m);
    float s = 0.f, total = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {{
        const float v = load_f(logits[base + c]);
        s += expf(v - m);
        total += v;
    }}
    s = block_sum(s);
    total = block_sum(total);
    if (threadIdx.x == 0) {{
        const float lse = m + logf(s);
        const float nll = lse - load_f(logits[base + target[row]]);
        partial[row] = {smooth_expr};
    }}"""

KL_BODY = """    float mp = -INFINITY, mq = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {{
        mp = fmaxf(mp, load_f(p[base + c]));
        mq = fmaxf(mq, load_f(q[base + c]));
    }}
    mp = block_max(mp);
    mq = block_max(mq);
    float sp = 0.f, sq = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {{
        sp += expf(load_f(p[base + c]) - mp);
        sq += expf(load_f(q[base + c]) - mq);
    }}
    const float lse_p = mp + logf(block_sum(sp)), lse_q = mq + logf(block_sum(sq));
    float kl = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {{
        const float log_t = load_f(q[base + c]) - lse_q;
        kl += expf(log_t) * (log_t - (load_f(p[base + c]) - lse_p));
    }}
    kl = block_sum(kl);
    if (threadIdx.x == 0) partial[row] = kl;"""

TRIPLET_BODY = """    float dp = 0.f, dn = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {{
        const float av = load_f(a[base + c]);
        const float u = av - load_f(pos[base + c]) + 1e-6f, w = av - load_f(neg[base + c]) + 1e-6f;
        dp += u * u;
        dn += w * w;
    }}
    dp = block_sum(dp);
    dn = block_sum(dn);
    if (threadIdx.x == 0) partial[row] = fmaxf(sqrtf(dp) - sqrtf(dn) + {margin}, 0.f);"""


def row_loss_pair(rng: random.Random, name: str, dtype: DType) -> SeedPair:
    from .rowwise import row_threads
    b, c = rng.choice([(4096, 1000), (1024, 4096), (16384, 128), (512, 32000), (8192, 512), (256, 10000)])
    consts = {"batch_size": b, "num_classes": c}
    if name == "cross_entropy":
        ls = rng.choice((0.0, 0.0, 0.1))
        call = "F.cross_entropy(logits, targets" + (f", label_smoothing={ls})" if ls else ")")
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
        stem = "cross_entropy" + ("_smoothed" if ls else "")
        scale = "1.f / (float)rows"
    elif name == "kl_div":
        call = 'F.kl_div(F.log_softmax(p, dim=-1), F.softmax(q, dim=-1), reduction="batchmean")'
        fwd_params = ["p", "q"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype)] * 2
        row_body, stem = KL_BODY, "kl_div_softmax"
        row_params = "const elem_t* __restrict__ p, const elem_t* __restrict__ q"
        host_params = "torch::Tensor p, torch::Tensor q"
        checks = host_checks(stem, ["p", "q"], dtype)
        rows_expr, cols_expr, first = "p.size(0)", "p.size(1)", "p"
        row_args = f"{ptr('p')}, {ptr('q')}"
        call_args = "p.contiguous(), q.contiguous()"
        scale = "1.f / (float)rows"
    else:
        margin = rng.choice((1.0, 0.5, 2.0))
        call = f"F.triplet_margin_loss(anchor, positive, negative, margin={margin})"
        fwd_params = ["anchor", "positive", "negative"]
        inputs = [tensor_input(["batch_size", "num_classes"], dtype)] * 3
        row_body, stem = TRIPLET_BODY.format(margin=cf(margin)), "triplet_margin_loss"
        row_params = "const elem_t* __restrict__ a, const elem_t* __restrict__ pos, const elem_t* __restrict__ neg"
        host_params = "torch::Tensor a, torch::Tensor pos, torch::Tensor neg"
        checks = host_checks(stem, ["a", "pos", "neg"], dtype)
        rows_expr, cols_expr, first = "a.size(0)", "a.size(1)", "a"
        row_args = f"{ptr('a')}, {ptr('pos')}, {ptr('neg')}"
        call_args = "anchor.contiguous(), positive.contiguous(), negative.contiguous()"
        scale = "1.f / (float)rows"
    body = ROW_LOSS.format(stem=stem, row_params=row_params, row_body=row_body, final=FINAL_STAGE.format(stem=stem),
                           host_params=host_params, checks=checks, rows_expr=rows_expr, cols_expr=cols_expr,
                           first=first, stream=STREAM, threads=row_threads(c), row_args=row_args,
                           op=ptr("out", False), scale=scale, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{name} averaged over the batch.", init_params=[], init_body="",
                          forward_params=fwd_params, forward_body=f"return {call}", constants=consts, inputs=inputs,
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, reductions=True),
                              signature=f"torch::Tensor {stem}({host_params})", init_params=[], init_body="",
                              forward_params=fwd_params, forward_body=f"return {stem}_ext.{stem}({call_args})")
    fused = name in ("kl_div",) or stem.endswith("smoothed")
    fams = [name, "loss"] + (["log_softmax", "softmax"] if name in ("kl_div", "cross_entropy") else [])
    return make_pair(name, fams, 2 if fused else 1, stem, dtype, problem, candidate)


def gen_losses(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        dtype = FP32 if rng.random() < 0.75 else pick_dtype(rng, 1.0)
        if rng.random() < 0.65:
            name = rng.choice(list(POINTWISE_LOSSES))
            pre = random_chain(rng, rng.choice((0, 0, 1)), ["sigmoid", "tanh", "relu", "scale", "softplus"])
            # half-precision sums of millions of terms overflow: keep those to the mean
            reduction = "mean" if name == "hinge_loss" or dtype is not FP32 or rng.random() < 0.75 else "sum"
            yield pointwise_loss_pair(rng, name, pre, reduction, dtype)
        else:
            yield row_loss_pair(rng, rng.choice(("cross_entropy", "kl_div", "triplet_margin_loss")), dtype)


GENERATORS = {
    "loss": (gen_losses, 450),
}
