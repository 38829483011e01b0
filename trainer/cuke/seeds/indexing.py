"""Data-movement families: embedding lookup, index_select, gather, scatter / scatter_add (unique indices, so no
atomics and bitwise-deterministic results), masked_fill, tiled transposes and head permutes, each with optional
fused pointwise epilogues. Row gathers copy 16-byte packs with a block per row or one element per thread;
transposes go through a shared tile or map each output element to its source."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .codestyle import MODES_ALL
from .elementwise import _numel, pick_dtype, pick_shape, pointwise_pair
from .ops import cf, chain_cuda, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .pointwise import Load, PointwiseSpec
from .render import (FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cdiv, cuda_prelude,
                     grid_1d, host_checks, index_checks, make_pair, ptr, tensor_input)
from .writers import draw_writer

ROW_GATHER_KERNEL = """
constexpr int VEC = 16 / sizeof(elem_t);
struct alignas(16) Pack {{ elem_t v[VEC]; }};

// One block per output row: the selected table row is copied with 16-byte packs, the epilogue applied in registers.
__global__ void {stem}_kernel(const elem_t* __restrict__ table, const int64_t* __restrict__ idx,
                              {extra_params}elem_t* __restrict__ out, int64_t rows_per_pos, int64_t D, bool vectorized) {{
    const int64_t r = blockIdx.x;
    const elem_t* __restrict__ src = table + idx[r] * D;
    elem_t* __restrict__ dst = out + r * D;
    const int64_t n_vec = vectorized ? D / VEC : 0;
    for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {{
        Pack p = reinterpret_cast<const Pack*>(src)[i];
        #pragma unroll
        for (int j = 0; j < VEC; ++j) {{
            float v = load_f(p.v[j]);
{vec_epilogue}
            p.v[j] = store_f(v);
        }}
        reinterpret_cast<Pack*>(dst)[i] = p;
    }}
    for (int64_t c = n_vec * VEC + threadIdx.x; c < D; c += blockDim.x) {{
        float v = load_f(src[c]);
{epilogue}
        dst[c] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor table, torch::Tensor idx{extra_args}) {{
{checks}
    TORCH_CHECK(table.dim() == 2, "{stem}: the table must be 2-D");
    const int64_t D = table.size(1), rows = idx.numel();
    auto shape = idx.sizes().vec();
    shape.push_back(D);
    auto out = torch::empty(shape, table.options());
    if (rows == 0) return out;
    const int64_t rows_per_pos = {rows_per_pos};
    const bool vectorized = D % VEC == 0 && reinterpret_cast<uintptr_t>(table.data_ptr()) % 16 == 0{extra_align};
    {stem}_kernel<<<(unsigned)rows, {threads}, 0, {stream}>>>({tp}, idx.data_ptr<int64_t>(), {extra_ptrs}{op},
        rows_per_pos, D, vectorized);
{launch_check}
    return out;
}}
"""


ROW_GATHER_SCALAR = """
// One thread per output element (grid-stride): element i is column i % D of output row i / D.
__global__ void {stem}_kernel(const elem_t* __restrict__ table, const int64_t* __restrict__ idx,
                              {extra_params}elem_t* __restrict__ out, int64_t rows_per_pos, int64_t D, int64_t total) {{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int64_t r = i / D, c = i % D;
        float v = load_f(table[idx[r] * D + c]);
{epilogue}
        out[i] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor table, torch::Tensor idx{extra_args}) {{
{checks}
    TORCH_CHECK(table.dim() == 2, "{stem}: the table must be 2-D");
    const int64_t D = table.size(1), rows = idx.numel();
    auto shape = idx.sizes().vec();
    shape.push_back(D);
    auto out = torch::empty(shape, table.options());
    if (rows == 0) return out;
    const int64_t rows_per_pos = {rows_per_pos};
    const int64_t total = rows * D;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({tp}, idx.data_ptr<int64_t>(), {extra_ptrs}{op}, rows_per_pos, D, total);
{launch_check}
    return out;
}}
"""


def embedding_pair(rng: random.Random, kind: str, scale: bool, positional: bool, chain: list, dtype: DType) -> SeedPair:
    dt = "" if dtype is FP32 else f", dtype={dtype.torch}"
    writer = draw_writer(rng)
    if kind == "embedding":
        v, d = rng.choice([(32000, 512), (50000, 256), (8192, 1024), (1000, 768), (30000, 384), (65536, 128)])
        b, t = rng.choice([(16, 128), (8, 512), (32, 64), (4, 1024)])
        consts = {"vocab_size": v, "dim": d, "batch_size": b, "seq_len": t}
        layer = writer.prefs[0] == "nn" or rng.random() < 0.3
        if layer:
            init = [f"self.embed = nn.Embedding(vocab_size, dim{dt})"]
            table_ref, fwd = "self.embed.weight", ["x = self.embed(idx)"]
        else:
            init = [f"self.weight = nn.Parameter(torch.randn(vocab_size, dim{dt}))"]
            table_ref, fwd = "self.weight", [f"x = {spelled('embedding', 'idx', 'self.weight')}"]
        if positional:
            init.append(f"self.pos = nn.Parameter(0.1 * torch.randn(seq_len, dim{dt}))")
        init_params, init_inputs = ["vocab_size", "dim", "seq_len"], ["vocab_size", "dim", "seq_len"]
        fwd_params, inputs = ["idx"], ["torch.randint(0, vocab_size, (batch_size, seq_len))"]
        call_table, call_idx = table_ref, "idx.contiguous()"
    else:
        n, d = rng.choice([(100000, 256), (50000, 512), (20000, 128), (4096, 1024)])
        m = rng.choice((4096, 16384, 1000, 65536))
        consts = {"num_rows": n, "dim": d, "num_selected": m}
        init, init_params, init_inputs = [], [], []
        fwd_params = ["x", "idx"]
        inputs = [tensor_input(["num_rows", "dim"], dtype), "torch.randint(0, num_rows, (num_selected,))"]
        fwd = [f"x = {spelled('index_select', 'x', 'idx')}"]
        call_table, call_idx = "x.contiguous()", "idx.contiguous()"
        positional = False
    if scale:
        fwd.append(rng.choice(["x = x * (x.shape[-1] ** 0.5)", "x = x * math.sqrt(x.size(-1))"]))
    if positional:
        fwd.append("x = x + self.pos")
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    stem = kind + ("_scaled" if scale else "") + ("_pos" if positional else "") + ("_act" if chain else "")
    epi = []
    if scale:
        epi.append(f"            v = v * {cf(consts['dim'] ** 0.5)};")
    if positional:
        epi.append("            v = v + load_f(pos[(r % rows_per_pos) * D + {col}]);")
    epi.append(chain_cuda(chain, "v", 12))
    epilogue_t = "\n".join(e for e in epi if e.strip())
    extra = ["pos"] if positional else []
    vector = rng.random() < 0.6
    fields = dict(stem=stem, extra_params="".join(f"const elem_t* __restrict__ {e}, " for e in extra),
                  extra_args="".join(f", torch::Tensor {e}" for e in extra),
                  checks=host_checks(stem, ["table"] + extra, dtype) + "\n" + index_checks(stem, ["idx"]),
                  rows_per_pos="pos.size(0)" if positional else "1", stream=STREAM, tp=ptr("table"),
                  extra_ptrs="".join(ptr(e) + ", " for e in extra), op=ptr("out", False), launch_check=LAUNCH_CHECK)
    if vector:
        body = ROW_GATHER_KERNEL.format(
            epilogue=epilogue_t.replace("{col}", "c"), vec_epilogue=epilogue_t.replace("{col}", "i * VEC + j"),
            extra_align=" && reinterpret_cast<uintptr_t>(pos.data_ptr()) % 16 == 0" if positional else "",
            threads=128, **fields)
        prelude, strategy = cuda_prelude(dtype), "vectorized"
    else:
        body = ROW_GATHER_SCALAR.format(epilogue=epilogue_t.replace("{col}", "c").replace("            ", "        "),
                                        grid=grid_1d("total"), **fields)
        prelude, strategy = cuda_prelude(dtype, modes=MODES_ALL), "grid_stride"
    call = ", ".join([call_table, call_idx] + (["self.pos"] if positional else []))
    what = "embedding lookup" if kind == "embedding" else "row selection (index_select)"
    extras = [w for w, on in (("scaled by sqrt(dim)", scale), ("plus learned positions", positional)) if on]
    problem = ProblemSpec(doc=what + (f" {' and '.join(extras)}" if extras else "") +
                          (f", then {chain_doc(chain)}" if chain else ""),
                          init_params=init_params, init_body="\n".join(init), forward_params=fwd_params,
                          forward_body="\n".join(fwd), constants=consts, inputs=inputs, init_inputs=init_inputs,
                          writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=prelude, init_params=init_params,
                              init_body="\n".join(init), forward_params=fwd_params,
                              forward_body=f"return _ext_.{stem}({call})")
    fused = scale or positional or bool(chain)
    fams = [kind] + (["scale"] if scale else []) + (["positional_add"] if positional else []) + chain_tags(chain)
    comp = ">".join(filter(None, [kind, "scale_sqrt_d" if scale else "", "pos_add" if positional else "",
                                  chain_signature(chain)]))
    return make_pair(rng, kind, fams, 2 if fused else 1, comp, dtype, problem, candidate, strategy)


GATHER_KERNEL = """
// out[b, k] = x[b, idx[b, k]] (gather along dim 1), one thread per output element.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, const int64_t* __restrict__ idx, elem_t* __restrict__ out,
                              int64_t N, int64_t K, int64_t total) {{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int64_t b = i / K;
        float v = load_f(x[b * N + idx[i]]);
{epilogue}
        out[i] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor idx) {{
{checks}
    TORCH_CHECK(x.dim() == 2 && idx.dim() == 2 && idx.size(0) == x.size(0), "{stem}: expected x [B, N], idx [B, K]");
    auto out = torch::empty(idx.sizes(), x.options());
    const int64_t total = out.numel();
    if (total == 0) return out;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({xp}, idx.data_ptr<int64_t>(), {op}, x.size(1), idx.size(1), total);
{launch_check}
    return out;
}}
"""

SCATTER_KERNEL = """
constexpr int VEC = 16 / sizeof(elem_t);
struct alignas(16) Pack {{ elem_t v[VEC]; }};

// out starts as a copy of x; indices are unique within a row, so the scatter needs no atomics and is deterministic.
__global__ void {stem}_copy(const elem_t* __restrict__ x, elem_t* __restrict__ out, int64_t n, bool vectorized) {{
    const int64_t step = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n_vec = vectorized ? n / VEC : 0;
    for (int64_t i = first; i < n_vec; i += step) reinterpret_cast<Pack*>(out)[i] = reinterpret_cast<const Pack*>(x)[i];
    for (int64_t i = n_vec * VEC + first; i < n; i += step) out[i] = x[i];
}}

__global__ void {stem}_kernel(const elem_t* __restrict__ x, const int64_t* __restrict__ idx,
                              const elem_t* __restrict__ src, elem_t* __restrict__ out, int64_t N, int64_t K,
                              int64_t total) {{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int64_t dst = (i / K) * N + idx[i];
        out[dst] = store_f({value});
    }}
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor idx, torch::Tensor src) {{
{checks}
    TORCH_CHECK(x.dim() == 2 && idx.sizes() == src.sizes() && idx.size(0) == x.size(0),
                "{stem}: expected x [B, N], idx and src [B, K]");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel(), total = idx.numel();
    if (n == 0) return out;
    auto stream = {stream};
    const bool vectorized = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
    const int64_t work = vectorized ? n / VEC + n % VEC : n;
    {stem}_copy<<<{grid_copy}, 256, 0, stream>>>({xp}, {op}, n, vectorized);
{launch_check}
    if (total == 0) return out;
    {stem}_kernel<<<{grid}, 256, 0, stream>>>({xp}, idx.data_ptr<int64_t>(), {sp}, {op}, x.size(1), idx.size(1), total);
{launch_check}
    return out;
}}
"""


def gather_pair(rng: random.Random, chain: list, dtype: DType) -> SeedPair:
    b, n, k = rng.choice([(4096, 1024, 256), (1024, 4096, 1024), (16384, 256, 64), (512, 8192, 2048)])
    fwd = [f"x = {spelled('gather', 'x', 'idx', d=1)}"] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    stem = "gather" + ("_act" if chain else "")
    body = GATHER_KERNEL.format(stem=stem, epilogue=chain_cuda(chain, "v", 8),
                                checks=host_checks(stem, ["x"], dtype) + "\n" + index_checks(stem, ["idx"]),
                                grid=grid_1d("total"), stream=STREAM, xp=ptr("x"), op=ptr("out", False),
                                launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="gather along dim 1" + (f", then {chain_doc(chain)}" if chain else ""), init_params=[],
                          init_body="", forward_params=["x", "idx"], forward_body="\n".join(fwd),
                          constants={"batch_size": b, "dim": n, "num_picks": k},
                          inputs=[tensor_input(["batch_size", "dim"], dtype),
                                  "torch.randint(0, dim, (batch_size, num_picks))"], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALL), init_params=[],
                              init_body="", forward_params=["x", "idx"],
                              forward_body=f"return _ext_.{stem}(x.contiguous(), idx.contiguous())")
    return make_pair(rng, "gather", ["gather"] + chain_tags(chain), 2 if chain else 1,
                     ">".join(filter(None, ["gather", chain_signature(chain)])), dtype, problem, candidate, "grid_stride")


def scatter_pair(rng: random.Random, add: bool, dtype: DType) -> SeedPair:
    b, n, k = rng.choice([(4096, 1024, 256), (1024, 4096, 512), (16384, 256, 32), (256, 16384, 4096)])
    op = "scatter_add" if add else "scatter"
    fwd = [rng.choice([f"x = x.{op}(1, idx, src)", f"x = torch.{op}(x, 1, idx, src)"]), "return x"]
    stem = op
    value = "load_f(x[dst]) + load_f(src[i])" if add else "load_f(src[i])"
    body = SCATTER_KERNEL.format(stem=stem, value=value,
                                 checks=host_checks(stem, ["x", "src"], dtype) + "\n" + index_checks(stem, ["idx"]),
                                 stream=STREAM, grid_copy=grid_1d("work"), grid=grid_1d("total"), xp=ptr("x"),
                                 op=ptr("out", False), sp=ptr("src"), launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc=f"{op.replace('_', ' ')} along dim 1 with indices unique within each row", init_params=[],
                          init_body="", forward_params=["x", "idx", "src"], forward_body="\n".join(fwd),
                          constants={"batch_size": b, "dim": n, "num_updates": k},
                          inputs=[tensor_input(["batch_size", "dim"], dtype),
                                  "torch.argsort(torch.rand(batch_size, dim), dim=1)[:, :num_updates].contiguous()",
                                  tensor_input(["batch_size", "num_updates"], dtype)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype), init_params=[], init_body="",
                              forward_params=["x", "idx", "src"],
                              forward_body=f"return _ext_.{stem}(x.contiguous(), idx.contiguous(), src.contiguous())")
    return make_pair(rng, op, [op, "scatter"], 1, op, dtype, problem, candidate, "multi_kernel")


def masked_fill_pair(rng: random.Random, chain: list, dtype: DType) -> SeedPair:
    dims, consts = pick_shape(rng)
    fill = rng.choice((0.0, -1.0, 1.0, 0.5))
    fwd = [f"x = {spelled('masked_fill', 'x', 'mask', v=fill)}"] + [f"x = {spelled(op.tag, 'x')}" for op in chain]
    fwd.append("return x")
    spec = PointwiseSpec("masked_fill" + ("_act" if chain else ""),
                         [Load("x", dtype.name, "same", "a"), Load("mask", "bool", "same", "m")],
                         [f"float v = m ? {cf(fill)} : a;"], dtype.name, tail=list(chain))
    problem = ProblemSpec(doc=f"masked fill with {fill}" + (f", then {chain_doc(chain)}" if chain else ""),
                          init_params=[], init_body="", forward_params=["x", "mask"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, dtype), f"torch.rand({', '.join(dims)}) > 0.5"],
                          init_inputs=[])
    return pointwise_pair(rng, spec, problem, "masked_fill", ["masked_fill", "where"] + chain_tags(chain),
                          2 if chain else 1, ">".join(filter(None, ["masked_fill", chain_signature(chain)])), dtype.name,
                          _numel(consts, dims), int(consts[dims[-1]]), ["x.contiguous()", "mask.contiguous()"])


TRANSPOSE_KERNEL = """
// Transpose of the last two dims through a 32 x 33 shared tile: reads and writes are both coalesced and the
// padding column keeps the shared-memory columns conflict-free.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int R, int C) {{
    __shared__ float tile[32][33];
    const long long plane = (long long)blockIdx.z * R * C;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {{
        const int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < R && c < C) tile[dy][threadIdx.x] = load_f(x[plane + (long long)r * C + c]);
    }}
    __syncthreads();
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {{
        const int c = c0 + dy, r = r0 + threadIdx.x;
        if (r < R && c < C) {{
            float v = tile[threadIdx.x][dy];
{epilogue}
            y[plane + (long long)c * R + r] = store_f(v);
        }}
    }}
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    TORCH_CHECK(x.dim() >= 2, "{stem}: need at least 2 dims");
    const int R = (int)x.size(-2), C = (int)x.size(-1);
    auto shape = x.sizes().vec();
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    auto y = torch::empty(shape, x.options());
    if (y.numel() == 0) return y;
    const int planes = (int)(x.numel() / ((long long)R * C));
    dim3 grid((C + 31) / 32, (R + 31) / 32, planes), block(32, 8);
    {stem}_kernel<<<grid, block, 0, {stream}>>>({xp}, {yp}, R, C);
{launch_check}
    return y;
}}
"""


TRANSPOSE_MAP_KERNEL = """
// Each output element reads its source directly (y[.., c, r] = x[.., r, c]): coalesced writes, strided reads.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int R, int C, long long total) {{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int r = i % R, c = (i / R) % C;
        const long long plane = i / ((long long)R * C);
        float v = load_f(x[plane * R * C + (long long)r * C + c]);
{epilogue}
        y[i] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    TORCH_CHECK(x.dim() >= 2, "{stem}: need at least 2 dims");
    const int R = (int)x.size(-2), C = (int)x.size(-1);
    auto shape = x.sizes().vec();
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    auto y = torch::empty(shape, x.options());
    const long long total = y.numel();
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({xp}, {yp}, R, C, total);
{launch_check}
    return y;
}}
"""


def transpose_pair(rng: random.Random, chain: list, dtype: DType) -> SeedPair:
    if rng.random() < 0.5:
        r, c = rng.choice([(4096, 4096), (2048, 8192), (1000, 3000), (8192, 1024)])
        consts, dims = {"rows": r, "cols": c}, ["rows", "cols"]
        expr = rng.choice(["x.t().contiguous()", "x.T.contiguous()", spelled("transpose", "x", d0=0, d1=1) + ".contiguous()"])
    else:
        b, r, c = rng.choice([(32, 512, 512), (64, 256, 1024), (8, 2048, 1024), (16, 1000, 300)])
        consts, dims = {"batch_size": b, "rows": r, "cols": c}, ["batch_size", "rows", "cols"]
        expr = rng.choice([spelled("transpose", "x", d0=1, d1=2) + ".contiguous()", "x.permute(0, 2, 1).contiguous()",
                           "x.mT.contiguous()"])
    fwd = [f"x = {expr}"] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    stem = "transpose" + ("_act" if chain else "")
    tiled = rng.random() < 0.75
    fields = dict(stem=stem, checks=host_checks(stem, ["x"], dtype), stream=STREAM, xp=ptr("x"), yp=ptr("y", False),
                  launch_check=LAUNCH_CHECK)
    if tiled:
        body = TRANSPOSE_KERNEL.format(epilogue=chain_cuda(chain, "v", 12), **fields)
    else:
        body = TRANSPOSE_MAP_KERNEL.format(epilogue=chain_cuda(chain, "v", 8), grid=grid_1d("total"), **fields)
    problem = ProblemSpec(doc="materialised transpose of the last two dims" + (f", then {chain_doc(chain)}" if chain else ""),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, dtype)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALL), init_params=[],
                              init_body="", forward_params=["x"], forward_body=f"return _ext_.{stem}(x.contiguous())")
    return make_pair(rng, "transpose", ["transpose"] + chain_tags(chain), 2 if chain else 1,
                     ">".join(filter(None, ["transpose", chain_signature(chain)])), dtype, problem, candidate,
                     "tiled_transpose" if tiled else "gather_map")


PERMUTE_KERNEL = """
constexpr int VEC = 16 / sizeof(elem_t);
struct alignas(16) Pack {{ elem_t v[VEC]; }};

// [B, T, H, D] -> [B, H, T, D]: each block moves one (b, h, t) row of D contiguous elements with 16-byte packs.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int T, int H, int D, bool vectorized) {{
    const long long row = blockIdx.x;  // output row index over (b, h, t)
    const int t = row % T, h = (row / T) % H;
    const long long b = row / ((long long)T * H);
    const elem_t* __restrict__ src = x + ((b * T + t) * H + h) * D;
    elem_t* __restrict__ dst = y + row * D;
    const int n_vec = vectorized ? D / VEC : 0;
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {{
        Pack p = reinterpret_cast<const Pack*>(src)[i];
        #pragma unroll
        for (int j = 0; j < VEC; ++j) {{
            float v = load_f(p.v[j]);
{epilogue}
            p.v[j] = store_f(v);
        }}
        reinterpret_cast<Pack*>(dst)[i] = p;
    }}
    for (int c = n_vec * VEC + threadIdx.x; c < D; c += blockDim.x) {{
        float v = load_f(src[c]);
{epilogue}
        dst[c] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: expected [B, T, H, D]");
    const int B = (int)x.size(0), T = (int)x.size(1), H = (int)x.size(2), D = (int)x.size(3);
    auto y = torch::empty({{B, H, T, D}}, x.options());
    if (y.numel() == 0) return y;
    const bool vectorized = D % VEC == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
    {stem}_kernel<<<(unsigned)((long long)B * H * T), {threads}, 0, {stream}>>>({xp}, {yp}, T, H, D, vectorized);
{launch_check}
    return y;
}}
"""


PERMUTE_MAP_KERNEL = """
// [B, T, H, D] -> [B, H, T, D], one thread per output element: the source index comes from its coordinates.
__global__ void {stem}_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, int T, int H, int D, long long total) {{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int d = i % D, t = (i / D) % T, h = (i / ((long long)D * T)) % H;
        const long long b = i / ((long long)D * T * H);
        float v = load_f(x[((b * T + t) * H + h) * D + d]);
{epilogue}
        y[i] = store_f(v);
    }}
}}

torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: expected [B, T, H, D]");
    const int B = (int)x.size(0), T = (int)x.size(1), H = (int)x.size(2), D = (int)x.size(3);
    auto y = torch::empty({{B, H, T, D}}, x.options());
    const long long total = y.numel();
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>({xp}, {yp}, T, H, D, total);
{launch_check}
    return y;
}}
"""


def permute_pair(rng: random.Random, chain: list, dtype: DType) -> SeedPair:
    b, t, h, d = rng.choice([(8, 512, 16, 64), (4, 1024, 32, 128), (16, 256, 8, 64), (2, 2048, 16, 128), (32, 128, 12, 64)])
    writer = draw_writer(rng)
    if rng.random() < 0.4:  # heads split from a flat hidden dim by a view, as attention code does
        consts = {"batch_size": b, "seq_len": t, "num_heads": h, "head_dim": d}
        fwd = ["B, T, _ = x.shape", "x = x.view(B, T, self.num_heads, -1).permute(0, 2, 1, 3).contiguous()"]
        inputs = [f"torch.randn(batch_size, seq_len, num_heads * head_dim{'' if dtype is FP32 else ', dtype=' + dtype.torch})"]
        init_params, init_body, init_inputs = ["num_heads"], "self.num_heads = num_heads", ["num_heads"]
        call = f"x.view(x.shape[0], x.shape[1], self.num_heads, -1).contiguous()"
        doc = "splits a hidden dim into heads: [B, T, H * D] -> [B, H, T, D]"
    else:
        consts = {"batch_size": b, "seq_len": t, "num_heads": h, "head_dim": d}
        fwd = [rng.choice(["x = x.permute(0, 2, 1, 3).contiguous()", "x = x.transpose(1, 2).contiguous()"])]
        inputs = [tensor_input(["batch_size", "seq_len", "num_heads", "head_dim"], dtype)]
        init_params, init_body, init_inputs = [], "", []
        call = "x.contiguous()"
        doc = "swaps the sequence and head dims: [B, T, H, D] -> [B, H, T, D]"
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    stem = "permute_heads" + ("_act" if chain else "")
    rows = rng.random() < 0.6
    fields = dict(stem=stem, checks=host_checks(stem, ["x"], dtype), stream=STREAM, xp=ptr("x"), yp=ptr("y", False),
                  launch_check=LAUNCH_CHECK)
    if rows:
        body = PERMUTE_KERNEL.format(epilogue=chain_cuda(chain, "v", 12), threads=32 if d <= 128 else 64, **fields)
        prelude = cuda_prelude(dtype)
    else:
        body = PERMUTE_MAP_KERNEL.format(epilogue=chain_cuda(chain, "v", 8), grid=grid_1d("total"), **fields)
        prelude = cuda_prelude(dtype, modes=MODES_ALL)
    problem = ProblemSpec(doc=doc + (f", then {chain_doc(chain)}" if chain else ""), init_params=init_params,
                          init_body=init_body, forward_params=["x"], forward_body="\n".join(fwd), constants=consts,
                          inputs=inputs, init_inputs=init_inputs, writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=prelude, init_params=init_params, init_body=init_body,
                              forward_params=["x"], forward_body=f"return _ext_.{stem}({call})")
    return make_pair(rng, "permute", ["permute"] + chain_tags(chain), 2 if chain else 1,
                     ">".join(filter(None, ["permute0213", chain_signature(chain)])), dtype, problem, candidate,
                     "vectorized" if rows else "gather_map")


def gen_indexing(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        dtype = pick_dtype(rng, 0.3)
        chain = random_chain(rng, rng.choice((0, 1, 1, 2)))
        if r < 0.25:
            yield embedding_pair(rng, "embedding", rng.random() < 0.5, rng.random() < 0.5, chain, dtype)
        elif r < 0.4:
            yield embedding_pair(rng, "index_select", rng.random() < 0.2, False, chain, dtype)
        elif r < 0.55:
            yield gather_pair(rng, chain, dtype)
        elif r < 0.65:
            yield scatter_pair(rng, rng.random() < 0.5, dtype)
        elif r < 0.75:
            yield masked_fill_pair(rng, chain, dtype)
        elif r < 0.9:
            yield transpose_pair(rng, chain, dtype)
        else:
            yield permute_pair(rng, chain, dtype)


GENERATORS = {
    "indexing": (gen_indexing, 900),
}
