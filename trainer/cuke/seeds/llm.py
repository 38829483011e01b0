"""LLM sub-structures (level 3): fused attention (flash-style online softmax, causal, GQA), causal masked softmax,
GELU MLP and SwiGLU blocks on the tiled GEMM, rotary embeddings, and HF-style RMSNorm with an optional residual."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .codestyle import MODES_ALL
from .dense import FP32_GEMM_STRATEGIES, gemm_source
from .elementwise import pick_dtype
from .ops import spelled
from .render import (BF16, FP16, FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair,
                     cuda_prelude, float_prelude, grid_1d, host_checks, make_pair, ptr, tensor_input)
from .rowwise import RMS_STATS, ROWNORM_KERNEL, map_rows, row_mapping, row_prelude, row_threads, strategy_name

ATTENTION_KERNEL = """
// Flash-style attention on CUDA cores: a block owns QB query rows of one (batch, head); K/V tiles of KT keys are
// staged in shared memory; each warp keeps an online softmax (running max, running sum, output accumulators) for
// its QPW rows, so the T x S score matrix never touches global memory.
constexpr int HEAD_DIM = {head_dim};
constexpr int KT = 32;
constexpr int QPW = 4;
constexpr int WARPS = 4;
constexpr int QB = QPW * WARPS;
constexpr int DPL = HEAD_DIM / 32;
constexpr bool CAUSAL = {causal};

__device__ __forceinline__ float warp_allmax(float v) {{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}}

__device__ __forceinline__ float warp_allsum(float v) {{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}}

__global__ void __launch_bounds__(128) {stem}_kernel(const elem_t* __restrict__ q, const elem_t* __restrict__ k,
        const elem_t* __restrict__ v, elem_t* __restrict__ o, int H, int HKV, int T, int S, float scale) {{
    __shared__ float Qs[QB][HEAD_DIM + 1];
    __shared__ float Ks[KT][HEAD_DIM + 1];
    __shared__ float Vs[KT][HEAD_DIM + 1];
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int kvh = h / (H / HKV);
    const long long q_base = (long long)bh * T * HEAD_DIM;
    const long long kv_base = ((long long)b * HKV + kvh) * S * HEAD_DIM;
    const int q0 = blockIdx.x * QB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < QB * HEAD_DIM; i += blockDim.x) {{
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        Qs[r][d] = q0 + r < T ? load_f(q[q_base + (long long)(q0 + r) * HEAD_DIM + d]) * scale : 0.f;
    }}
    float m[QPW], l[QPW], acc[QPW][DPL];
    #pragma unroll
    for (int qi = 0; qi < QPW; ++qi) {{
        m[qi] = -INFINITY;
        l[qi] = 0.f;
        #pragma unroll
        for (int dd = 0; dd < DPL; ++dd) acc[qi][dd] = 0.f;
    }}
    const int kv_end = CAUSAL ? min(S, q0 + QB) : S;
    for (int k0 = 0; k0 < kv_end; k0 += KT) {{
        __syncthreads();
        for (int i = threadIdx.x; i < KT * HEAD_DIM; i += blockDim.x) {{
            const int r = i / HEAD_DIM, d = i % HEAD_DIM;
            const bool ok = k0 + r < S;
            const long long off = kv_base + (long long)(k0 + r) * HEAD_DIM + d;
            Ks[r][d] = ok ? load_f(k[off]) : 0.f;
            Vs[r][d] = ok ? load_f(v[off]) : 0.f;
        }}
        __syncthreads();
        #pragma unroll
        for (int qi = 0; qi < QPW; ++qi) {{
            const int r = warp * QPW + qi, qrow = q0 + r, key = k0 + lane;
            float s = 0.f;
            #pragma unroll 16
            for (int d = 0; d < HEAD_DIM; ++d) s = fmaf(Qs[r][d], Ks[lane][d], s);
            const bool valid = key < S && (!CAUSAL || key <= qrow);
            s = valid ? s : -INFINITY;
            const float m_new = fmaxf(m[qi], warp_allmax(s));
            const float alpha = m_new == -INFINITY ? 1.f : expf(m[qi] - m_new);
            const float p = valid ? expf(s - m_new) : 0.f;
            l[qi] = l[qi] * alpha + warp_allsum(p);
            #pragma unroll
            for (int dd = 0; dd < DPL; ++dd) acc[qi][dd] *= alpha;
            #pragma unroll 8
            for (int j = 0; j < KT; ++j) {{
                const float pj = __shfl_sync(0xffffffff, p, j);
                #pragma unroll
                for (int dd = 0; dd < DPL; ++dd) acc[qi][dd] = fmaf(pj, Vs[j][lane + 32 * dd], acc[qi][dd]);
            }}
            m[qi] = m_new;
        }}
    }}
    #pragma unroll
    for (int qi = 0; qi < QPW; ++qi) {{
        const int qrow = q0 + warp * QPW + qi;
        if (qrow >= T) continue;
        const float inv = 1.f / l[qi];
        #pragma unroll
        for (int dd = 0; dd < DPL; ++dd)
            o[q_base + (long long)qrow * HEAD_DIM + lane + 32 * dd] = store_f(acc[qi][dd] * inv);
    }}
}}

torch::Tensor {stem}(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {{
{checks}
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.sizes() == v.sizes(),
                "{stem}: expected q [B, H, T, D] and k, v [B, H_kv, S, D]");
    const int B = (int)q.size(0), H = (int)q.size(1), T = (int)q.size(2), HKV = (int)k.size(1), S = (int)k.size(2);
    TORCH_CHECK(q.size(3) == HEAD_DIM && k.size(3) == HEAD_DIM, "{stem}: compiled for head_dim ", HEAD_DIM);
    TORCH_CHECK(k.size(0) == B && H % HKV == 0, "{stem}: batch mismatch or heads not a multiple of kv heads");
    TORCH_CHECK(!CAUSAL || S == T, "{stem}: the causal kernel expects as many keys as queries");
    auto o = torch::empty_like(q);
    if (o.numel() == 0) return o;
    dim3 grid((T + QB - 1) / QB, B * H);
    {stem}_kernel<<<grid, 128, 0, {stream}>>>({qp}, {kp}, {vp}, {op}, H, HKV, T, S, (float)scale);
{launch_check}
    return o;
}}
"""

ATTN_SHAPES = [(2, 8, 256, 64), (4, 8, 128, 64), (1, 16, 512, 64), (8, 4, 128, 32), (2, 12, 256, 64),
               (1, 8, 1024, 64), (4, 4, 256, 128), (16, 8, 64, 64), (2, 16, 384, 32), (1, 32, 128, 128)]


def attention_pair(rng: random.Random, causal: bool, gqa: int, style: str, dtype: DType) -> SeedPair:
    b, h, t, d = rng.choice(ATTN_SHAPES)
    hkv = h // gqa if h % gqa == 0 else h
    gqa = h // hkv
    consts = {"batch_size": b, "num_heads": h, "num_kv_heads": hkv, "seq_len": t, "head_dim": d}
    fwd = []
    if gqa > 1:
        fwd += ["k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)",
                "v = v.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)"]
    if style == "sdpa":
        fwd.append(f"return F.scaled_dot_product_attention(q, k, v, is_causal={causal})")
    else:
        fwd.append(f"scores = {spelled('matmul', 'q', 'k.transpose(-2, -1)')} * self.scale")
        if causal:
            fwd += ["T = q.shape[-2]",
                    "mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)",
                    'scores = scores.masked_fill(mask, float("-inf"))']
        fwd += [f"attn = {spelled('softmax', 'scores', dim=-1)}", f"return {spelled('matmul', 'attn', 'v')}"]
    init = ["self.num_heads = num_heads", "self.num_kv_heads = num_kv_heads", "self.scale = head_dim ** -0.5"]
    stem = "attention" + ("_causal" if causal else "") + ("_gqa" if gqa > 1 else "")
    body = ATTENTION_KERNEL.format(head_dim=d, causal="true" if causal else "false", stem=stem,
                                   checks=host_checks(stem, ["q", "k", "v"], dtype), stream=STREAM, qp=ptr("q"),
                                   kp=ptr("k"), vp=ptr("v"), op=ptr("o", False), launch_check=LAUNCH_CHECK)
    dims_q = ["batch_size", "num_heads", "seq_len", "head_dim"]
    dims_kv = ["batch_size", "num_kv_heads", "seq_len", "head_dim"]
    problem = ProblemSpec(doc=("causal " if causal else "") + "scaled dot-product attention" +
                          (f" with grouped KV heads ({gqa} query heads per KV head)" if gqa > 1 else ""),
                          init_params=["num_heads", "num_kv_heads", "head_dim"], init_body="\n".join(init),
                          forward_params=["q", "k", "v"], forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(dims_q, dtype), tensor_input(dims_kv, dtype), tensor_input(dims_kv, dtype)],
                          init_inputs=["num_heads", "num_kv_heads", "head_dim"])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALL),
                              init_params=["num_heads", "num_kv_heads", "head_dim"], init_body="\n".join(init),
                              forward_params=["q", "k", "v"],
                              forward_body=f"return _ext_.{stem}(q.contiguous(), k.contiguous(), v.contiguous(), self.scale)")
    fams = ["attention", "softmax", "bmm"] + (["causal_mask"] if causal else []) + (["gqa"] if gqa > 1 else [])
    comp = "attention" + ("[causal]" if causal else "") + (f"[gqa{gqa}]" if gqa > 1 else "") + f"[{style}]"
    return make_pair(rng, "attention", fams, 3, comp, dtype, problem, candidate, "flash_attention")


CAUSAL_SOFTMAX_KERNEL = """
// Causal masked softmax over [..., T, T] scores: row r of a T x T plane sees columns 0..r; masked columns are
// written as exact zeros without being read.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int T, float scale) {{
    const long long base = (long long)blockIdx.x * T;
    const int visible = blockIdx.x % T + 1;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < visible; c += blockDim.x) m = fmaxf(m, load_f(x[base + c]) * scale);
    m = block_max(m);
    float s = 0.f;
    for (int c = threadIdx.x; c < visible; c += blockDim.x) s += expf(load_f(x[base + c]) * scale - m);
    const float inv = 1.f / block_sum(s);
    for (int c = threadIdx.x; c < T; c += blockDim.x)
        y[base + c] = store_f(c < visible ? expf(load_f(x[base + c]) * scale - m) * inv : 0.f);
}}

torch::Tensor {stem}(torch::Tensor x, double scale) {{
{checks}
    TORCH_CHECK(x.dim() >= 2 && x.size(-1) == x.size(-2), "{stem}: expected square [..., T, T] scores");
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int T = (int)x.size(-1);
    {stem}_kernel<<<(unsigned)(x.numel() / T), {threads}, 0, {stream}>>>({xp}, {yp}, T, (float)scale);
{launch_check}
    return y;
}}
"""


def causal_softmax_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, h, t = rng.choice([(4, 8, 256), (2, 16, 512), (8, 12, 128), (1, 8, 1024), (2, 4, 2048)])
    scale = rng.choice((1.0, 0.125, 0.0883883476))
    fwd = ["T = scores.shape[-1]",
           "mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=scores.device), diagonal=1)",
           f'scores = (scores * {scale}).masked_fill(mask, float("-inf"))' if scale != 1.0 else
           'scores = scores.masked_fill(mask, float("-inf"))',
           f"return {spelled('softmax', 'scores', dim=-1)}"]
    stem = "causal_softmax"
    body = CAUSAL_SOFTMAX_KERNEL.format(stem=stem, checks=host_checks(stem, ["x"], dtype), threads=row_threads(t),
                                        stream=STREAM, xp=ptr("x"), yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="causally masked softmax of attention scores", init_params=[], init_body="",
                          forward_params=["scores"], forward_body="\n".join(fwd),
                          constants={"batch_size": b, "num_heads": h, "seq_len": t},
                          inputs=[tensor_input(["batch_size", "num_heads", "seq_len", "seq_len"], dtype)], init_inputs=[])
    flavour = rng.choices(["warp_shuffle", "smem_tree", "cub"], [3, 2, 2])[0]
    threads = row_threads(t)
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=cuda_prelude(dtype, reductions=flavour,
                                                   block_threads=threads if flavour == "cub" else None, modes=MODES_ALL),
                              init_params=[], init_body="", forward_params=["scores"],
                              forward_body=f"return _ext_.{stem}(scores.contiguous(), {scale})")
    return make_pair(rng, "causal_softmax", ["causal_softmax", "softmax", "causal_mask"], 3,
                     "causal_mask>softmax" + (f">scale{scale}" if scale != 1.0 else ""), dtype, problem, candidate,
                     flavour)


def _linear_host(stem: str, launch: str, x: str, w: str, epi: list[str], out: str, m: str, n: str, k: str) -> str:
    args = "".join(f"{e}.data_ptr<float>(), " for e in epi)
    return (f"    {launch}({x}.data_ptr<float>(), {w}.data_ptr<float>(), {args}{out}.data_ptr<float>(), "
            f"{m}, {n}, {k}, 1, 0, 0, 0);\n" + LAUNCH_CHECK)


def mlp_pair(rng: random.Random, swiglu: bool, residual: bool) -> SeedPair:
    tokens, d, hidden = rng.choice([(128, 256, 1024), (256, 256, 512), (64, 512, 1024), (512, 128, 512),
                                    (256, 384, 768), (128, 512, 1536)])
    act = rng.choice(("gelu", "gelu_tanh", "silu", "relu")) if not swiglu else "silu"
    act_torch = spelled({"gelu": "gelu", "gelu_tanh": "gelu_tanh", "silu": "silu", "relu": "relu"}[act], "h")
    act_cuda = {"gelu": "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
                "gelu_tanh": "v = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));",
                "silu": "v = v / (1.f + expf(-v));", "relu": "v = fmaxf(v, 0.f);"}[act]
    consts = {"num_tokens": tokens, "dim": d, "hidden_dim": hidden}
    stem = ("swiglu_mlp" if swiglu else f"mlp_{act}") + ("_residual" if residual else "")
    strategy = rng.choices(["register_tiled_gemm", "smem_tiled_gemm"], [FP32_GEMM_STRATEGIES["register_tiled_gemm"],
                                                                        FP32_GEMM_STRATEGIES["smem_tiled_gemm"]])[0]
    tile = rng.choice((16, 32))
    if swiglu:
        init = ["self.w_gate = nn.Parameter(torch.randn(hidden_dim, dim) * dim ** -0.5)",
                "self.w_up = nn.Parameter(torch.randn(hidden_dim, dim) * dim ** -0.5)",
                "self.w_down = nn.Parameter(torch.randn(dim, hidden_dim) * hidden_dim ** -0.5)"]
        fwd = [f"h = {spelled('silu', spelled('linear', 'x', 'self.w_gate'))} * {spelled('linear', 'x', 'self.w_up')}",
               f"out = {spelled('linear', 'h', 'self.w_down')}"]
        body = (gemm_source(f"{stem}_gate", "n", "t", [], "", strategy, tile)
                + gemm_source(f"{stem}_up", "n", "t", [("gate", "float")],
                              "                const float g = gate[(long long)m * N + n];\n"
                              "                v = g / (1.f + expf(-g)) * v;", strategy, tile)
                + gemm_source(f"{stem}_down", "n", "t", [("residual", "float")] if residual else [],
                              "                v += residual[(long long)m * N + n];" if residual else "", strategy, tile))
        tensors = ["x", "w_gate", "w_up", "w_down"] + (["residual"] if residual else [])
        host = [f"torch::Tensor {stem}({', '.join('torch::Tensor ' + t for t in tensors)}) {{",
                host_checks(stem, tensors, FP32),
                "    const int M = (int)x.size(0), D = (int)x.size(1), Hd = (int)w_gate.size(0);",
                f'    TORCH_CHECK(w_gate.size(1) == D && w_up.sizes() == w_gate.sizes() && w_down.size(0) == D && w_down.size(1) == Hd, "{stem}: weight shapes do not match x");',
                "    auto gate = torch::empty({M, Hd}, x.options());",
                "    auto h = torch::empty({M, Hd}, x.options());",
                "    auto out = torch::empty({M, D}, x.options());",
                "    if (out.numel() == 0) return out;",
                _linear_host(stem, f"{stem}_gate_launch", "x", "w_gate", [], "gate", "M", "Hd", "D"),
                _linear_host(stem, f"{stem}_up_launch", "x", "w_up", ["gate"], "h", "M", "Hd", "D"),
                _linear_host(stem, f"{stem}_down_launch", "h", "w_down", ["residual"] if residual else [], "out",
                             "M", "D", "Hd"),
                "    return out;", "}"]
        call = ["x.contiguous()", "self.w_gate", "self.w_up", "self.w_down"]
    else:
        init = ["self.w1 = nn.Parameter(torch.randn(hidden_dim, dim) * dim ** -0.5)",
                "self.b1 = nn.Parameter(0.1 * torch.randn(hidden_dim))",
                "self.w2 = nn.Parameter(torch.randn(dim, hidden_dim) * hidden_dim ** -0.5)",
                "self.b2 = nn.Parameter(0.1 * torch.randn(dim))"]
        fwd = [f"h = {spelled('linear_bias', 'x', 'self.w1', 'self.b1')}", f"h = {act_torch}",
               f"out = {spelled('linear_bias', 'h', 'self.w2', 'self.b2')}"]
        body = (gemm_source(f"{stem}_fc1", "n", "t", [("bias", "float")],
                            "                v += bias[n];\n                " + act_cuda, strategy, tile)
                + gemm_source(f"{stem}_fc2", "n", "t", [("bias", "float")] + ([("residual", "float")] if residual else []),
                              "                v += bias[n];" + ("\n                v += residual[(long long)m * N + n];" if residual else ""),
                              strategy, tile))
        tensors = ["x", "w1", "b1", "w2", "b2"] + (["residual"] if residual else [])
        host = [f"torch::Tensor {stem}({', '.join('torch::Tensor ' + t for t in tensors)}) {{",
                host_checks(stem, tensors, FP32),
                "    const int M = (int)x.size(0), D = (int)x.size(1), Hd = (int)w1.size(0);",
                f'    TORCH_CHECK(w1.size(1) == D && b1.numel() == Hd && w2.size(0) == D && w2.size(1) == Hd && b2.numel() == D, "{stem}: weight shapes do not match x");',
                "    auto h = torch::empty({M, Hd}, x.options());",
                "    auto out = torch::empty({M, D}, x.options());",
                "    if (out.numel() == 0) return out;",
                _linear_host(stem, f"{stem}_fc1_launch", "x", "w1", ["b1"], "h", "M", "Hd", "D"),
                _linear_host(stem, f"{stem}_fc2_launch", "h", "w2", ["b2"] + (["residual"] if residual else []), "out",
                             "M", "D", "Hd"),
                "    return out;", "}"]
        call = ["x.contiguous()", "self.w1", "self.b1", "self.w2", "self.b2"]
    if residual:
        fwd.append("out = out + x")
        call.append("x.contiguous()")
    fwd.append("return out")
    body = body + "\n" + "\n".join(host)
    problem = ProblemSpec(doc=("SwiGLU feed-forward block" if swiglu else f"two-layer MLP with {act}") +
                          (" and a residual connection" if residual else ""),
                          init_params=["dim", "hidden_dim"], init_body="\n".join(init), forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(["num_tokens", "dim"], FP32)], init_inputs=["dim", "hidden_dim"])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(),
                              init_params=["dim", "hidden_dim"], init_body="\n".join(init), forward_params=["x"],
                              forward_body=f"return _ext_.{stem}({', '.join(call)})")
    family = "swiglu" if swiglu else "mlp"
    fams = [family, "linear", "gemm", act] + (["residual_add"] if residual else [])
    comp = f"{family}[{act}]" + ("+residual" if residual else "")
    return make_pair(rng, family, fams, 3, comp, FP32, problem, candidate, strategy)


ROTARY_KERNEL = """
// Rotary embedding (rotate-half form): one thread per (row, i < D/2) pair, producing both halves.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ cos_t,
                              const elem_t* __restrict__ sin_t, elem_t* __restrict__ y, int T, int D, long long pairs) {{
    const int half = D / 2;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += step) {{
        const long long row = i / half;
        const int j = i % half, t = row % T;
        const float x1 = load_f(x[row * D + j]), x2 = load_f(x[row * D + j + half]);
        const elem_t* c = cos_t + (long long)t * D;
        const elem_t* s = sin_t + (long long)t * D;
        y[row * D + j] = store_f(x1 * load_f(c[j]) - x2 * load_f(s[j]));
        y[row * D + j + half] = store_f(x2 * load_f(c[j + half]) + x1 * load_f(s[j + half]));
    }}
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor cos_t, torch::Tensor sin_t) {{
{checks}
    TORCH_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0, "{stem}: expected [B, H, T, D] with even D");
    const int T = (int)x.size(2), D = (int)x.size(3);
    TORCH_CHECK(cos_t.size(0) >= T && cos_t.size(1) == D && sin_t.sizes() == cos_t.sizes(),
                "{stem}: cos/sin tables must be [>= T, D]");
    auto y = torch::empty_like(x);
    const long long pairs = x.numel() / 2;
    if (pairs == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({xp}, {cp}, {sp}, {yp}, T, D, pairs);
{launch_check}
    return y;
}}
"""


def rotary_pair(rng: random.Random, dtype: DType) -> SeedPair:
    b, h, t, d = rng.choice([(2, 16, 1024, 64), (4, 32, 512, 128), (8, 8, 256, 64), (1, 32, 2048, 128), (16, 12, 128, 64)])
    base = rng.choice((10000.0, 500000.0, 1000000.0))
    conv = "" if dtype is FP32 else f".to({dtype.torch})"
    init = ["inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))",
            "freqs = torch.outer(torch.arange(max_seq_len).float(), inv_freq)",
            "emb = torch.cat((freqs, freqs), dim=-1)",
            f'self.register_buffer("cos_cached", emb.cos(){conv})',
            f'self.register_buffer("sin_cached", emb.sin(){conv})']
    # (not `half`: the strict checks read that word in a reference as a half-precision task)
    fwd = ["T = x.shape[2]", "mid = x.shape[-1] // 2", "x1, x2 = x[..., :mid], x[..., mid:]",
           "rotated = torch.cat((-x2, x1), dim=-1)", "return x * self.cos_cached[:T] + rotated * self.sin_cached[:T]"]
    stem = "rotary_embedding"
    body = ROTARY_KERNEL.format(stem=stem, checks=host_checks(stem, ["x", "cos_t", "sin_t"], dtype),
                                grid=grid_1d("pairs"), stream=STREAM, xp=ptr("x"), cp=ptr("cos_t"), sp=ptr("sin_t"),
                                yp=ptr("y", False), launch_check=LAUNCH_CHECK)
    consts = {"batch_size": b, "num_heads": h, "seq_len": t, "head_dim": d, "base": base}
    problem = ProblemSpec(doc="rotary position embedding (rotate_half form) applied to [B, H, T, D]",
                          init_params=["head_dim", "max_seq_len", "base"], init_body="\n".join(init),
                          forward_params=["x"], forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(["batch_size", "num_heads", "seq_len", "head_dim"], dtype)],
                          init_inputs=["head_dim", "seq_len", "base"])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALL),
                              init_params=["head_dim", "max_seq_len", "base"], init_body="\n".join(init),
                              forward_params=["x"],
                              forward_body=f"return _ext_.{stem}(x.contiguous(), self.cos_cached, self.sin_cached)")
    return make_pair(rng, "rotary_embedding", ["rotary_embedding", "concat", "elementwise_chain"], 3,
                     "rotary[rotate_half]", dtype, problem, candidate, "grid_stride")


def llm_rmsnorm_pair(rng: random.Random, residual: bool, dtype: DType) -> SeedPair:
    """HF-style RMSNorm: statistics in fp32, normalised value cast back to the input dtype before the weight."""
    tokens, d = rng.choice([(4096, 4096), (2048, 2048), (8192, 1024), (1024, 5120), (512, 8192), (16384, 512)])
    eps = rng.choice((1e-6, 1e-5))
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    init = [f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim{dt}))", "self.eps = eps"]
    fwd = (["x = x + residual"] if residual else []) + [
        "h = x.to(torch.float32)", "variance = h.pow(2).mean(-1, keepdim=True)",
        "h = h * torch.rsqrt(variance + self.eps)", "return self.weight * h.to(x.dtype)"]
    stem = "llm_rmsnorm" + ("_residual" if residual else "")
    load = "load_f(store_f(load_f(x[base + c]) + load_f(res[base + c])))" if residual else "load_f(x[base + c])"
    tensors = (["res"] if residual else []) + ["weight"]
    extra_checks = host_checks(stem, tensors, dtype) + f'\n    TORCH_CHECK(weight.numel() == n, "{stem}: weight must have x.size(-1) elements");'
    mode, flavour = row_mapping(rng, d)
    threads = row_threads(d) if mode == "block" else rng.choice((128, 256))
    kernel = ROWNORM_KERNEL.format(doc="fp32 statistics; the normalised value is rounded to the input dtype before "
                                       "the weight multiply, as the reference does.",
                                   stem=stem, extra_params="".join(f"const elem_t* __restrict__ {t}, " for t in tensors),
                                   cache_decl="", stats=RMS_STATS.format(load=load, cache=""), load2=load,
                                   write="        v = load_f(weight[c]) * load_f(store_f(v * rstd));", post="")
    host = "\n".join([
        f"torch::Tensor {stem}(torch::Tensor x{''.join(', torch::Tensor ' + t for t in tensors)}, double eps) {{",
        host_checks(stem, ["x"], dtype), "    auto y = torch::empty_like(x);", "    if (y.numel() == 0) return y;",
        "    const int64_t n = x.size(-1);", "    const int64_t rows = x.numel() / n;", extra_checks,
        f"    {stem}_kernel<<<{map_rows('@LAUNCH@', mode, threads)}, 0, {STREAM}>>>({ptr('x')}, "
        f"{''.join(ptr(t) + ', ' for t in tensors)}{ptr('y', False)}, rows, n, (float)eps);",
        LAUNCH_CHECK, "    return y;", "}"])
    fwd_params = ["x"] + (["residual"] if residual else [])
    call = ["x.contiguous()"] + (["residual.contiguous()"] if residual else []) + ["self.weight", "self.eps"]
    problem = ProblemSpec(doc="RMSNorm as in Llama-style decoders" + (", applied to x + residual" if residual else ""),
                          init_params=["dim", "eps"], init_body="\n".join(init), forward_params=fwd_params,
                          forward_body="\n".join(fwd), constants={"num_tokens": tokens, "dim": d},
                          inputs=[tensor_input(["num_tokens", "dim"], dtype)] * len(fwd_params),
                          init_inputs=["dim", repr(eps)])
    candidate = CandidateSpec(stem=stem, cuda_body=map_rows(kernel, mode, threads) + "\n" + host,
                              prelude=row_prelude(dtype, mode, flavour, threads),
                              init_params=["dim", "eps"], init_body="\n".join(init), forward_params=fwd_params,
                              forward_body=f"return _ext_.{stem}({', '.join(call)})")
    fams = ["rms_norm", "llm_rmsnorm"] + (["residual_add"] if residual else [])
    return make_pair(rng, "llm_rmsnorm", fams, 3, "residual_add>rms_norm[hf]" if residual else "rms_norm[hf]", dtype,
                     problem, candidate, strategy_name(mode, flavour))


def gen_llm(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        half = rng.choice((FP32, FP16, BF16))
        if r < 0.4:
            yield attention_pair(rng, rng.random() < 0.5, rng.choice((1, 1, 2, 4)), rng.choice(("explicit", "explicit", "sdpa")),
                                 half)
        elif r < 0.52:
            yield causal_softmax_pair(rng, pick_dtype(rng, 0.4))
        elif r < 0.75:
            yield mlp_pair(rng, rng.random() < 0.4, rng.random() < 0.3)
        elif r < 0.87:
            yield rotary_pair(rng, half)
        else:
            yield llm_rmsnorm_pair(rng, rng.random() < 0.5, rng.choice((FP16, BF16, FP32)))


GENERATORS = {
    "llm": (gen_llm, 700),
}
