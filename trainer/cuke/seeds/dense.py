"""Dense families: GEMM variants (mm, transposed operands, linear, bmm, matvec) with fused epilogues, direct
conv1d / conv2d / depthwise conv with fused epilogues, and max / avg / global pooling.

fp32 GEMMs come register-tiled, with simple shared-memory tiles, or as a GEMM kernel plus a separate epilogue kernel
(the references run with TF32 off); fp16 / bf16 linear and matmul problems get tensor-core kernels through WMMA
(16x16x16 fragments, fp32 accumulation, operands staged in shared memory)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .codestyle import MODES_ALIAS
from .ops import cf, chain_cuda, chain_doc, chain_signature, chain_tags, random_chain, spelled
from .render import (BF16, FP16, FP32, LAUNCH_CHECK, STREAM, CandidateSpec, DType, ProblemSpec, SeedPair, cdiv,
                     cuda_prelude, float_prelude, grid_1d, host_checks, make_pair, ptr, tensor_input)
from .writers import draw_writer

GEMM_KERNEL = """
// Shared-memory tiled SGEMM: a BM x BN tile per block, BK-deep slabs of A and B staged in shared memory,
// a TM x TN register micro-tile per thread (rows ty + 16 i, cols tx + 16 j keep shared reads conflict-free and
// global writes coalesced). A is {a_doc}; B is {b_doc}.
template <int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__(256) {stem}_kernel(const float* __restrict__ A, const float* __restrict__ B,
        {epi_params}float* __restrict__ C, int M, int N, int K, long long strideA, long long strideB, long long strideC) {{
    constexpr int BK = 16;
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int bz = blockIdx.z;
    A += bz * strideA;
    B += bz * strideB;
    C += bz * strideC;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {{
        for (int l = threadIdx.x; l < BM * BK; l += 256) {{
{a_coords}
            const int m = row0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? A[{a_index}] : 0.f;
        }}
        for (int l = threadIdx.x; l < BK * BN; l += 256) {{
{b_coords}
            const int n = col0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? B[{b_index}] : 0.f;
        }}
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {{
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }}
        __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < TM; ++i) {{
        #pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int m = row0 + ty + 16 * i, n = col0 + tx + 16 * j;
            if (m < M && n < N) {{
                float v = acc[i][j];
{epilogue}
                C[(long long)m * N + n] = v;
            }}
        }}
    }}
}}

// Small problems get 32 x 32 tiles so that enough blocks exist to fill the GPU.
void {stem}_launch(const float* A, const float* B, {epi_args}float* C, int M, int N, int K, int batch,
                   long long sA, long long sB, long long sC) {{
    auto stream = {stream};
    const long long big_tiles = (long long)((M + 63) / 64) * ((N + 63) / 64) * batch;
    if (big_tiles >= 264) {{
        dim3 grid((N + 63) / 64, (M + 63) / 64, batch);
        {stem}_kernel<64, 64, 4, 4><<<grid, 256, 0, stream>>>(A, B, {epi_names}C, M, N, K, sA, sB, sC);
    }} else {{
        dim3 grid((N + 31) / 32, (M + 31) / 32, batch);
        {stem}_kernel<32, 32, 2, 2><<<grid, 256, 0, stream>>>(A, B, {epi_names}C, M, N, K, sA, sB, sC);
    }}
}}
"""

SMEM_GEMM_KERNEL = """
// Tiled matrix multiply: TILE x TILE tiles of A and B in shared memory, one output element per thread.
// A is {a_doc}; B is {b_doc}.
template <int TILE>
__global__ void {stem}_kernel(const float* __restrict__ A, const float* __restrict__ B, {epi_params}float* __restrict__ C,
                              int M, int N, int K, long long strideA, long long strideB, long long strideC) {{
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE + 1];
    A += blockIdx.z * strideA;
    B += blockIdx.z * strideB;
    C += blockIdx.z * strideC;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {{
{a_load}
{b_load}
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }}
    const int m = row0 + ty, n = col0 + tx;
    if (m < M && n < N) {{
        float v = acc;
{epilogue}
        C[(long long)m * N + n] = v;
    }}
}}

void {stem}_launch(const float* A, const float* B, {epi_args}float* C, int M, int N, int K, int batch,
                   long long sA, long long sB, long long sC) {{
    dim3 grid((N + {tile} - 1) / {tile}, (M + {tile} - 1) / {tile}, batch), block({tile}, {tile});
    {stem}_kernel<{tile}><<<grid, block, 0, {stream}>>>(A, B, {epi_names}C, M, N, K, sA, sB, sC);
}}
"""

# Shared tile loads of the simple kernel, per layout: As[m][k], Bs[k][n], each read coalesced along its
# contiguous dimension.
SMEM_A_LOADS = {
    "n": "        {{ const int m = row0 + ty, k = k0 + tx;\n"
         "          As[ty][tx] = (m < M && k < K) ? A[(long long)m * K + k] : 0.f; }}",
    "t": "        {{ const int m = row0 + tx, k = k0 + ty;\n"
         "          As[tx][ty] = (m < M && k < K) ? A[(long long)k * M + m] : 0.f; }}",
}
SMEM_B_LOADS = {
    "n": "        {{ const int n = col0 + tx, k = k0 + ty;\n"
         "          Bs[ty][tx] = (n < N && k < K) ? B[(long long)k * N + n] : 0.f; }}",
    "t": "        {{ const int n = col0 + ty, k = k0 + tx;\n"
         "          Bs[tx][ty] = (n < N && k < K) ? B[(long long)n * K + k] : 0.f; }}",
}

EPILOGUE_KERNEL = """
// The epilogue as its own pass over the GEMM output (element i is row i / N, column i % N).
__global__ void {stem}_epilogue_kernel(float* __restrict__ C, {epi_params}long long total, int N) {{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int n = (int)(i % N);
        const long long m = i / N;
        float v = C[i];
{epilogue}
        C[i] = v;
    }}
}}
"""

A_LAYOUTS = {
    # layout: (doc, coords, index)
    "n": ("row-major [M, K]", "            const int kk = l % BK, mm = l / BK;", "(long long)m * K + k"),
    "t": ("stored transposed as [K, M]", "            const int mm = l % BM, kk = l / BM;", "(long long)k * M + m"),
}
B_LAYOUTS = {
    "n": ("row-major [K, N]", "            const int nn = l % BN, kk = l / BN;", "(long long)k * N + n"),
    "t": ("stored transposed as [N, K] (a weight matrix)", "            const int kk = l % BK, nn = l / BK;",
          "(long long)n * K + k"),
}

GEMM_SMALL = [(64, 128, 128), (128, 256, 256), (256, 256, 128), (128, 512, 256), (256, 128, 512), (512, 256, 256),
              (96, 384, 192), (200, 300, 100), (32, 1024, 512), (256, 512, 512), (1024, 256, 256), (512, 512, 128),
              (64, 768, 768), (384, 384, 384)]
FP32_GEMM_STRATEGIES = {"register_tiled_gemm": 3.0, "smem_tiled_gemm": 1.5, "split_epilogue": 1.0}


def gemm_source(stem: str, a_layout: str, b_layout: str, epi_params: list[tuple[str, str]], epilogue: str,
                strategy: str = "register_tiled_gemm", tile: int = 16) -> str:
    """A GEMM kernel + its `{stem}_launch` host function in a strategy; `epi_params` are extra (name, C type)
    pointers the epilogue reads (the split strategy launches them in a second kernel: see gemm_epilogue_pass)."""
    a_doc, a_coords, a_index = A_LAYOUTS[a_layout]
    b_doc, b_coords, b_index = B_LAYOUTS[b_layout]
    kernel_epi = [] if strategy == "split_epilogue" else epi_params
    fields = dict(stem=stem, a_doc=a_doc, b_doc=b_doc,
                  epi_params="".join(f"const float* __restrict__ {n}, " for n, _ in kernel_epi),
                  epilogue="" if strategy == "split_epilogue" else epilogue,
                  epi_args="".join(f"const float* {n}, " for n, _ in kernel_epi),
                  epi_names="".join(f"{n}, " for n, _ in kernel_epi), stream=STREAM)
    if strategy == "smem_tiled_gemm":
        return SMEM_GEMM_KERNEL.format(tile=tile, a_load=SMEM_A_LOADS[a_layout].replace("{{", "{").replace("}}", "}"),
                                       b_load=SMEM_B_LOADS[b_layout].replace("{{", "{").replace("}}", "}"), **fields)
    return GEMM_KERNEL.format(a_coords=a_coords, a_index=a_index, b_coords=b_coords, b_index=b_index, **fields)


def gemm_epilogue_pass(stem: str, epi_params: list[tuple[str, str]], epilogue: str) -> tuple[str, str]:
    """(kernel source, host launch lines) of the separate epilogue pass of the split strategy."""
    kernel = EPILOGUE_KERNEL.format(stem=stem, epi_params="".join(f"const float* __restrict__ {n}, " for n, _ in epi_params),
                                    epilogue=epilogue.replace("                ", "        "))
    args = "".join(f"{n}.data_ptr<float>(), " for n, _ in epi_params)
    launch = (f"    {stem}_epilogue_kernel<<<{grid_1d('total', 256)}, 256, 0, {STREAM}>>>(OUT.data_ptr<float>(), {args}"
              "total, N);\n" + LAUNCH_CHECK)
    return kernel, launch


def epilogue_code(bias: bool, chain: list, residual: bool) -> str:
    lines = []
    if bias:
        lines.append("                v += bias[n];")
    lines.append(chain_cuda(chain, "v", 16))
    if residual:
        lines.append("                v += residual[(long long)m * N + n];")
    return "\n".join(line for line in lines if line.strip())


def _fp32_strategy(rng: random.Random, m: int, n: int, has_epilogue: bool) -> str:
    weights = dict(FP32_GEMM_STRATEGIES)
    if not has_epilogue:
        del weights["split_epilogue"]
    if m * n >= 256 * 256:
        weights["smem_tiled_gemm"] = 0.8  # one output per thread falls behind on the bigger tiles
    return rng.choices(list(weights), list(weights.values()))[0]


def linear_pair(rng: random.Random, chain: list, bias: bool, residual: bool, three_d: bool) -> SeedPair:
    m, n, k = rng.choice(GEMM_SMALL)
    fused = bool(chain) or residual
    writer = draw_writer(rng)
    layer = writer.prefs[0] == "nn" or rng.random() < 0.2
    stem = "linear" + ("_bias" if bias else "") + ("_act" if chain else "") + ("_residual" if residual else "")
    if three_d:
        seq = rng.choice((4, 8, 16))
        m = max(1, m // seq)
        consts = {"batch_size": m, "seq_len": seq, "in_features": k, "out_features": n}
        x_in = tensor_input(["batch_size", "seq_len", "in_features"], FP32)
        r_in = tensor_input(["batch_size", "seq_len", "out_features"], FP32)
    else:
        consts = {"batch_size": m, "in_features": k, "out_features": n}
        x_in = tensor_input(["batch_size", "in_features"], FP32)
        r_in = tensor_input(["batch_size", "out_features"], FP32)
    if layer:
        init = [f"self.fc = nn.Linear(in_features, out_features, bias={bias})"]
        weight, bias_ref = "self.fc.weight", "self.fc.bias"
        main = "x = self.fc(x)"
    else:
        init = ["self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features ** -0.5)"]
        if bias:
            init.append("self.bias = nn.Parameter(0.1 * torch.randn(out_features))")
        weight, bias_ref = "self.weight", "self.bias"
        main = f"x = {spelled('linear_bias', 'x', 'self.weight', 'self.bias') if bias else spelled('linear', 'x', 'self.weight')}"
    fwd_params = ["x"] + (["residual"] if residual else [])
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + (["x = x + residual"] if residual else [])
    fwd.append("return x")
    epi = ([("bias", "float")] if bias else []) + ([("residual", "float")] if residual else [])
    strategy = _fp32_strategy(rng, m, n, bias or residual or bool(chain))
    host_tensors = ["x", "weight"] + (["bias"] if bias else []) + (["residual"] if residual else [])
    epilogue = epilogue_code(bias, chain, residual)
    kernel_epi = [] if strategy == "split_epilogue" else epi
    host = [f"torch::Tensor {stem}({', '.join('torch::Tensor ' + t for t in host_tensors)}) {{",
            host_checks(stem, host_tensors, FP32),
            "    const int K = (int)x.size(-1), N = (int)weight.size(0);",
            "    const int M = (int)(x.numel() / K);",
            f'    TORCH_CHECK(weight.size(1) == K, "{stem}: weight must be [out_features, in_features]");']
    if bias:
        host.append(f'    TORCH_CHECK(bias.numel() == N, "{stem}: bias must have out_features elements");')
    host += ["    auto out_shape = x.sizes().vec();", "    out_shape.back() = N;",
             "    auto y = torch::empty(out_shape, x.options());"]
    if residual:
        host.append(f'    TORCH_CHECK(residual.sizes() == y.sizes(), "{stem}: residual must match the output shape");')
    host += ["    if (y.numel() == 0) return y;",
             f"    {stem}_launch(x.data_ptr<float>(), weight.data_ptr<float>(), "
             + "".join(f"{t}.data_ptr<float>(), " for t, _ in kernel_epi) + "y.data_ptr<float>(), M, N, K, 1, 0, 0, 0);",
             LAUNCH_CHECK]
    body = gemm_source(stem, "n", "t", epi, epilogue, strategy, rng.choice((16, 32)))
    if strategy == "split_epilogue" and epilogue:
        kernel, launch = gemm_epilogue_pass(stem, epi, epilogue)
        body += kernel
        host += ["    const long long total = y.numel();", launch.replace("OUT", "y")]
    host += ["    return y;", "}"]
    body += "\n" + "\n".join(host)
    call = ["x.contiguous()", weight] + ([bias_ref] if bias else []) + (["residual.contiguous()"] if residual else [])
    doc = "linear layer" + (" with bias" if bias else "") + (f", then {chain_doc(chain)}" if chain else "") + \
        (", plus a residual" if residual else "")
    problem = ProblemSpec(doc=doc, init_params=["in_features", "out_features"], init_body="\n".join(init),
                          forward_params=fwd_params, forward_body="\n".join(fwd), constants=consts,
                          inputs=[x_in] + ([r_in] if residual else []), init_inputs=["in_features", "out_features"],
                          writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(), init_params=["in_features", "out_features"],
                              init_body="\n".join(init), forward_params=fwd_params,
                              forward_body=f"return _ext_.{stem}({', '.join(call)})")
    fams = ["linear", "gemm"] + (["bias"] if bias else []) + chain_tags(chain) + (["residual_add"] if residual else [])
    comp = ">".join(filter(None, ["linear", "bias" if bias else "", chain_signature(chain),
                                  "residual_add" if residual else ""]))
    family = "gemm_epilogue" if fused else "linear"
    return make_pair(rng, family, fams, 2 if fused else 1, comp, FP32, problem, candidate, strategy)


MATMUL_FORMS = {
    # form: (a layout, b layout, forward expression, a shape, b shape, family)
    "mm": ("n", "n", spelled("mm", "a", "b"), ["M", "K"], ["K", "N"], "matmul"),
    "mm_ta": ("t", "n", spelled("matmul", "a.T", "b"), ["K", "M"], ["K", "N"], "matmul_transposed_a"),
    "mm_tb": ("n", "t", spelled("matmul", "a", "b.T"), ["M", "K"], ["N", "K"], "matmul_transposed_b"),
    "mm_tt": ("t", "t", spelled("matmul", "a.T", "b.T"), ["K", "M"], ["N", "K"], "matmul_transposed_ab"),
    "bmm": ("n", "n", spelled("bmm", "a", "b"), ["batch", "M", "K"], ["batch", "K", "N"], "bmm"),
    "bmm_tb": ("n", "t", spelled("bmm", "a", "b.transpose(1, 2)"), ["batch", "M", "K"], ["batch", "N", "K"],
               "bmm_transposed_b"),
}


def matmul_pair(rng: random.Random, form: str, chain: list, scale_by: float | None) -> SeedPair:
    a_lay, b_lay, expr, a_shape, b_shape, family = MATMUL_FORMS[form]
    m, n, k = rng.choice(GEMM_SMALL)
    batched = form.startswith("bmm")
    consts = {"M": m, "K": k, "N": n}
    if batched:
        b = rng.choice((4, 8, 16, 32))
        consts = {"batch": b, "M": max(16, m // 4), "K": k, "N": max(32, n // 2)}
    fwd = [f"x = {expr}"] + ([f"x = x * {scale_by}"] if scale_by is not None else [])
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    epi_lines = ([f"                v *= {cf(scale_by)};"] if scale_by is not None else []) + [chain_cuda(chain, "v", 16)]
    epilogue = "\n".join(line for line in epi_lines if line.strip())
    fused = bool(chain) or scale_by is not None
    stem = form + ("_fused" if fused else "")
    strategy = _fp32_strategy(rng, consts["M"], consts["N"], bool(epilogue))
    nd = 3 if batched else 2
    host = _matmul_host(stem, nd, batched, a_lay, b_lay, "fp32")
    host += [f"    {stem}_launch(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, batch, "
             "(long long)M * K, (long long)K * N, (long long)M * N);", LAUNCH_CHECK]
    body = gemm_source(stem, a_lay, b_lay, [], epilogue, strategy, rng.choice((16, 32)))
    if strategy == "split_epilogue" and epilogue:
        kernel, launch = gemm_epilogue_pass(stem, [], epilogue)
        body += kernel
        host += ["    const long long total = c.numel();", launch.replace("OUT", "c")]
    host += ["    return c;", "}"]
    body += "\n" + "\n".join(host)
    problem = ProblemSpec(doc=family.replace("_", " ") + (f" with {chain_doc(chain) or 'a scale'} fused after it" if fused else ""),
                          init_params=[], init_body="", forward_params=["a", "b"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(a_shape, FP32), tensor_input(b_shape, FP32)],
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(), init_params=[], init_body="",
                              forward_params=["a", "b"], forward_body=f"return _ext_.{stem}(a.contiguous(), b.contiguous())")
    fams = [family, "gemm"] + (["scale"] if scale_by is not None else []) + chain_tags(chain)
    comp = ">".join(filter(None, [form, f"scale{scale_by}" if scale_by is not None else "", chain_signature(chain)]))
    return make_pair(rng, family if not fused else "gemm_epilogue", fams, 2 if fused else 1, comp, FP32, problem,
                     candidate, strategy)


def _matmul_host(stem: str, nd: int, batched: bool, a_lay: str, b_lay: str, dtype: str) -> list[str]:
    return [f"torch::Tensor {stem}(torch::Tensor a, torch::Tensor b) {{", host_checks(stem, ["a", "b"], dtype),
            f'    TORCH_CHECK(a.dim() == {nd} && b.dim() == {nd}, "{stem}: expected {nd}-D operands");',
            "    const int batch = " + ("(int)a.size(0);" if batched else "1;"),
            f"    const int M = (int)a.size({nd - 1 if a_lay == 't' else nd - 2});",
            f"    const int K = (int)a.size({nd - 2 if a_lay == 't' else nd - 1});",
            f"    const int N = (int)b.size({nd - 2 if b_lay == 't' else nd - 1});",
            f"    const int Kb = (int)b.size({nd - 1 if b_lay == 't' else nd - 2});",
            f'    TORCH_CHECK(K == Kb, "{stem}: inner dimensions differ (", K, " vs ", Kb, ")");',
            *([f'    TORCH_CHECK(b.size(0) == batch, "{stem}: batch sizes differ");',
               "    auto c = torch::empty({batch, M, N}, a.options());"] if batched
              else ["    auto c = torch::empty({M, N}, a.options());"]),
            "    if (c.numel() == 0) return c;"]


# ---------------------------------------------------------------- tensor cores (fp16 / bf16)

WMMA_KERNEL = """
// Tensor-core GEMM with WMMA: a block of 4 warps owns a 64 x 64 tile of C, each warp a 32 x 32 quarter made of
// 2 x 2 fragments of 16 x 16; A and B are staged in shared memory BK = 32 deep (zero-padded at the edges, so any
// M, N, K work), accumulate in fp32, and the fp32 tile goes through shared memory for the fused epilogue.
// A is {a_doc}; B is {b_doc}.
using namespace nvcuda;
constexpr int WM_BM = 64, WM_BN = 64, WM_BK = 32;

__global__ void __launch_bounds__(128) {stem}_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B,
        {epi_params}elem_t* __restrict__ C, int M, int N, int K, long long strideA, long long strideB, long long strideC) {{
    __shared__ __align__(32) elem_t As[{as_shape}];
    __shared__ __align__(32) elem_t Bs[{bs_shape}];
    __shared__ __align__(32) float Cs[WM_BM][WM_BN + 4];
    A += blockIdx.z * strideA;
    B += blockIdx.z * strideB;
    C += blockIdx.z * strideC;
    const int row0 = blockIdx.y * WM_BM, col0 = blockIdx.x * WM_BN;
    const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
    const elem_t zero = store_f(0.f);
    for (int k0 = 0; k0 < K; k0 += WM_BK) {{
        for (int l = threadIdx.x; l < WM_BM * WM_BK; l += blockDim.x) {{
{a_load}
        }}
        for (int l = threadIdx.x; l < WM_BN * WM_BK; l += blockDim.x) {{
{b_load}
        }}
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < WM_BK; kk += 16) {{
            wmma::fragment<wmma::matrix_a, 16, 16, 16, elem_t, wmma::{a_major}> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, elem_t, wmma::{b_major}> fb[2];
            #pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], {a_frag}, {a_ld});
            #pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], {b_frag}, {b_ld});
            #pragma unroll
            for (int i = 0; i < 2; ++i)
                #pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }}
        __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&Cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], WM_BN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int l = threadIdx.x; l < WM_BM * WM_BN; l += blockDim.x) {{
        const int r = l / WM_BN, cc = l % WM_BN;
        const int m = row0 + r, n = col0 + cc;
        if (m < M && n < N) {{
            float v = Cs[r][cc];
{epilogue}
            C[(long long)m * N + n] = store_f(v);
        }}
    }}
}}
"""

WMMA_LAYOUTS = {
    # A layout: (shared shape, load statement, fragment major, fragment pointer, leading dim)
    "a_n": ("WM_BM * (WM_BK + 8)",
            "            const int r = l / WM_BK, kk = l % WM_BK, m = row0 + r, k = k0 + kk;\n"
            "            As[r * (WM_BK + 8) + kk] = (m < M && k < K) ? A[(long long)m * K + k] : zero;",
            "row_major", "&As[(wm * 32 + i * 16) * (WM_BK + 8) + kk]", "WM_BK + 8"),
    "a_t": ("WM_BK * (WM_BM + 8)",
            "            const int kk = l / WM_BM, r = l % WM_BM, m = row0 + r, k = k0 + kk;\n"
            "            As[kk * (WM_BM + 8) + r] = (m < M && k < K) ? A[(long long)k * M + m] : zero;",
            "col_major", "&As[kk * (WM_BM + 8) + wm * 32 + i * 16]", "WM_BM + 8"),
    "b_t": ("WM_BN * (WM_BK + 8)",
            "            const int r = l / WM_BK, kk = l % WM_BK, n = col0 + r, k = k0 + kk;\n"
            "            Bs[r * (WM_BK + 8) + kk] = (n < N && k < K) ? B[(long long)n * K + k] : zero;",
            "col_major", "&Bs[(wn * 32 + j * 16) * (WM_BK + 8) + kk]", "WM_BK + 8"),
    "b_n": ("WM_BK * (WM_BN + 8)",
            "            const int kk = l / WM_BN, r = l % WM_BN, n = col0 + r, k = k0 + kk;\n"
            "            Bs[kk * (WM_BN + 8) + r] = (n < N && k < K) ? B[(long long)k * N + n] : zero;",
            "row_major", "&Bs[kk * (WM_BN + 8) + wn * 32 + j * 16]", "WM_BN + 8"),
}


def wmma_source(stem: str, a_layout: str, b_layout: str, epi_params: list[str], epilogue: str) -> str:
    as_shape, a_load, a_major, a_frag, a_ld = WMMA_LAYOUTS["a_" + a_layout]
    bs_shape, b_load, b_major, b_frag, b_ld = WMMA_LAYOUTS["b_" + b_layout]
    return WMMA_KERNEL.format(stem=stem, a_doc=A_LAYOUTS[a_layout][0], b_doc=B_LAYOUTS[b_layout][0],
                              epi_params="".join(f"const elem_t* __restrict__ {n}, " for n in epi_params),
                              as_shape=as_shape, bs_shape=bs_shape, a_load=a_load, b_load=b_load, a_major=a_major,
                              b_major=b_major, a_frag=a_frag, b_frag=b_frag, a_ld=a_ld, b_ld=b_ld, epilogue=epilogue)


def _wmma_launch(stem: str, a: str, b: str, epi: list[str], out: str, batch: str, strides: str) -> list[str]:
    args = "".join(ptr(t) + ", " for t in epi)
    return [f"    dim3 grid((N + 63) / 64, (M + 63) / 64, {batch});",
            f"    {stem}_kernel<<<grid, 128, 0, {STREAM}>>>({ptr(a)}, {ptr(b)}, {args}{ptr(out, False)}, M, N, K, {strides});",
            LAUNCH_CHECK]


def half_linear_pair(rng: random.Random, chain: list, bias: bool, residual: bool, dtype: DType) -> SeedPair:
    m, n, k = rng.choice(GEMM_SMALL)
    writer = draw_writer(rng)
    layer = writer.prefs[0] == "nn" or rng.random() < 0.2
    dt = f", dtype={dtype.torch}"
    consts = {"batch_size": m, "in_features": k, "out_features": n}
    stem = "linear_tc" + ("_bias" if bias else "") + ("_act" if chain else "") + ("_residual" if residual else "")
    if layer:
        init = [f"self.fc = nn.Linear(in_features, out_features, bias={bias}{dt})"]
        weight, bias_ref, main = "self.fc.weight", "self.fc.bias", "x = self.fc(x)"
    else:
        init = [f"self.weight = nn.Parameter(torch.randn(out_features, in_features{dt}) * in_features ** -0.5)"]
        if bias:
            init.append(f"self.bias = nn.Parameter(0.1 * torch.randn(out_features{dt}))")
        weight, bias_ref = "self.weight", "self.bias"
        main = f"x = {spelled('linear_bias', 'x', 'self.weight', 'self.bias') if bias else spelled('linear', 'x', 'self.weight')}"
    fwd_params = ["x"] + (["residual"] if residual else [])
    fwd = [main] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + (["x = x + residual"] if residual else [])
    fwd.append("return x")
    epi = (["bias"] if bias else []) + (["residual"] if residual else [])
    lines = (["            v += load_f(bias[n]);"] if bias else []) + [chain_cuda(chain, "v", 12)] + \
        (["            v += load_f(residual[(long long)m * N + n]);"] if residual else [])
    epilogue = "\n".join(line for line in lines if line.strip())
    tensors = ["x", "weight"] + epi
    host = [f"torch::Tensor {stem}({', '.join('torch::Tensor ' + t for t in tensors)}) {{",
            host_checks(stem, tensors, dtype),
            "    const int K = (int)x.size(-1), N = (int)weight.size(0), M = (int)(x.numel() / K);",
            f'    TORCH_CHECK(weight.size(1) == K, "{stem}: weight must be [out_features, in_features]");',
            "    auto out_shape = x.sizes().vec();", "    out_shape.back() = N;",
            "    auto y = torch::empty(out_shape, x.options());", "    if (y.numel() == 0) return y;",
            *_wmma_launch(stem, "x", "weight", epi, "y", "1", "0, 0, 0"), "    return y;", "}"]
    body = wmma_source(stem, "n", "t", epi, epilogue) + "\n" + "\n".join(host)
    call = ["x.contiguous()", weight] + ([bias_ref] if bias else []) + (["residual.contiguous()"] if residual else [])
    problem = ProblemSpec(doc=f"{dtype.name} linear layer" + (" with bias" if bias else "") +
                          (f", then {chain_doc(chain)}" if chain else "") + (", plus a residual" if residual else ""),
                          init_params=["in_features", "out_features"], init_body="\n".join(init),
                          forward_params=fwd_params, forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(["batch_size", "in_features"], dtype)] +
                          ([tensor_input(["batch_size", "out_features"], dtype)] if residual else []),
                          init_inputs=["in_features", "out_features"], writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALIAS, headers=("<mma.h>",)),
                              init_params=["in_features", "out_features"], init_body="\n".join(init),
                              forward_params=fwd_params, forward_body=f"return _ext_.{stem}({', '.join(call)})")
    fused = bool(chain) or residual
    fams = ["linear", "gemm", "tensor_core"] + (["bias"] if bias else []) + chain_tags(chain) + \
        (["residual_add"] if residual else [])
    comp = ">".join(filter(None, [f"linear[{dtype.name}]", "bias" if bias else "", chain_signature(chain),
                                  "residual_add" if residual else ""]))
    return make_pair(rng, "gemm_epilogue" if fused else "linear", fams, 2 if fused else 1, comp, dtype, problem,
                     candidate, "wmma")


def half_matmul_pair(rng: random.Random, form: str, chain: list, scale_by: float | None, dtype: DType) -> SeedPair:
    a_lay, b_lay, expr, a_shape, b_shape, family = MATMUL_FORMS[form]
    m, n, k = rng.choice(GEMM_SMALL)
    batched = form.startswith("bmm")
    consts = {"M": m, "K": k, "N": n}
    if batched:
        consts = {"batch": rng.choice((4, 8, 16, 32)), "M": max(16, m // 4), "K": k, "N": max(32, n // 2)}
    fwd = [f"x = {expr}"] + ([f"x = x * {scale_by}"] if scale_by is not None else [])
    fwd += [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    lines = ([f"            v *= {cf(scale_by)};"] if scale_by is not None else []) + [chain_cuda(chain, "v", 12)]
    epilogue = "\n".join(line for line in lines if line.strip())
    fused = bool(chain) or scale_by is not None
    stem = form + "_tc" + ("_fused" if fused else "")
    host = _matmul_host(stem, 3 if batched else 2, batched, a_lay, b_lay, dtype.name)
    host += _wmma_launch(stem, "a", "b", [], "c", "batch", "(long long)M * K, (long long)K * N, (long long)M * N")
    host += ["    return c;", "}"]
    body = wmma_source(stem, a_lay, b_lay, [], epilogue) + "\n" + "\n".join(host)
    problem = ProblemSpec(doc=f"{dtype.name} " + family.replace("_", " ") +
                          (f" with {chain_doc(chain) or 'a scale'} fused after it" if fused else ""),
                          init_params=[], init_body="", forward_params=["a", "b"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(a_shape, dtype), tensor_input(b_shape, dtype)],
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=cuda_prelude(dtype, modes=MODES_ALIAS, headers=("<mma.h>",)),
                              init_params=[], init_body="", forward_params=["a", "b"],
                              forward_body=f"return _ext_.{stem}(a.contiguous(), b.contiguous())")
    fams = [family, "gemm", "tensor_core"] + (["scale"] if scale_by is not None else []) + chain_tags(chain)
    comp = ">".join(filter(None, [f"{form}[{dtype.name}]", f"scale{scale_by}" if scale_by is not None else "",
                                  chain_signature(chain)]))
    return make_pair(rng, family if not fused else "gemm_epilogue", fams, 2 if fused else 1, comp, dtype, problem,
                     candidate, "wmma")


# ---------------------------------------------------------------- matrix-vector

MATVEC_WARP = """
// One warp per output row: lanes stride the row with float4 loads when rows are 16-byte aligned, then a
// warp-shuffle sum.
__global__ void {stem}_kernel(const float* __restrict__ A, const float* __restrict__ v, float* __restrict__ y,
                              int M, int K, bool vec4) {{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= M) return;
    const float* __restrict__ a = A + (long long)row * K;
    float acc = 0.f;
    if (vec4) {{
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* v4 = reinterpret_cast<const float4*>(v);
        for (int i = lane; i < K / 4; i += 32) {{
            const float4 p = a4[i], q = v4[i];
            acc += p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w;
        }}
    }} else {{
        for (int i = lane; i < K; i += 32) acc += a[i] * v[i];
    }}
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) {{
        float r = acc;
{epilogue}
        y[row] = r;
    }}
}}
"""

MATVEC_BLOCK = """
// One block per output row, for long rows: threads stride the row, then a block reduction.
__global__ void {stem}_kernel(const float* __restrict__ A, const float* __restrict__ v, float* __restrict__ y,
                              int M, int K, bool vec4) {{
    const int row = blockIdx.x;
    const float* __restrict__ a = A + (long long)row * K;
    float acc = 0.f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) acc = fmaf(a[i], v[i], acc);
    acc = block_sum(acc);
    if (threadIdx.x == 0) {{
        float r = acc;
{epilogue}
        y[row] = r;
    }}
}}
"""

MATVEC_HOST = """
torch::Tensor {stem}(torch::Tensor A, torch::Tensor v) {{
{checks}
    TORCH_CHECK(A.dim() == 2 && v.dim() == 1 && A.size(1) == v.size(0), "{stem}: expected A [M, K] and v [K]");
    const int M = (int)A.size(0), K = (int)A.size(1);
    auto y = torch::empty({{M}}, A.options());
    if (M == 0) return y;
    const bool vec4 = K % 4 == 0 && reinterpret_cast<uintptr_t>(A.data_ptr()) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 == 0;
    {stem}_kernel<<<{grid}, {threads}, 0, {stream}>>>(A.data_ptr<float>(), v.data_ptr<float>(), y.data_ptr<float>(), M, K, vec4);
{launch_check}
    return y;
}}
"""


def matvec_pair(rng: random.Random, chain: list) -> SeedPair:
    m, k = rng.choice([(4096, 4096), (8192, 1024), (1024, 8192), (16384, 512), (2048, 2048), (3000, 1500), (512, 16384)])
    stem = "matvec" + ("_fused" if chain else "")
    fwd = [f"x = {spelled('matmul', 'a', 'v')}"] + [f"x = {spelled(op.tag, 'x')}" for op in chain] + ["return x"]
    block = k >= 4096 and rng.random() < 0.6
    threads = rng.choice((256, 512)) if block else 256
    flavour = rng.choice(["warp_shuffle", "smem_tree", "cub"]) if block else None
    template = MATVEC_BLOCK if block else MATVEC_WARP
    body = template.format(stem=stem, epilogue=chain_cuda(chain, "r", 8)) + MATVEC_HOST.format(
        stem=stem, checks=host_checks(stem, ["A", "v"], FP32), grid="M" if block else "(M + 7) / 8", threads=threads,
        stream=STREAM, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="matrix-vector product" + (f" followed by {chain_doc(chain)}" if chain else ""),
                          init_params=[], init_body="", forward_params=["a", "v"], forward_body="\n".join(fwd),
                          constants={"M": m, "K": k}, inputs=[tensor_input(["M", "K"], FP32), tensor_input(["K"], FP32)],
                          init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body,
                              prelude=float_prelude(flavour, threads if flavour == "cub" else None), init_params=[],
                              init_body="", forward_params=["a", "v"],
                              forward_body=f"return _ext_.{stem}(a.contiguous(), v.contiguous())")
    return make_pair(rng, "matvec", ["matvec", "gemm"] + chain_tags(chain), 2 if chain else 1,
                     ">".join(filter(None, ["matvec", chain_signature(chain)])), FP32, problem, candidate,
                     flavour or "warp_per_row")


def gen_gemm(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        r = rng.random()
        if r < 0.36:
            chain = random_chain(rng, rng.choice((0, 1, 1, 2, 2, 3)))
            yield linear_pair(rng, chain, rng.random() < 0.85, rng.random() < 0.25, rng.random() < 0.3)
        elif r < 0.64:
            chain = random_chain(rng, rng.choice((0, 0, 1, 2, 3)))
            scale = rng.choice((None, None, 0.5, 0.125, 2.0))
            yield matmul_pair(rng, rng.choice(list(MATMUL_FORMS)), chain, scale)
        elif r < 0.78:  # half-precision epilogues stay short: each reference op rounds its result
            chain = random_chain(rng, rng.choice((0, 1, 1, 2)))
            yield half_linear_pair(rng, chain, rng.random() < 0.85, rng.random() < 0.25, rng.choice((FP16, BF16)))
        elif r < 0.9:
            chain = random_chain(rng, rng.choice((0, 0, 1, 2)))
            scale = rng.choice((None, None, 0.5, 0.125, 2.0))
            yield half_matmul_pair(rng, rng.choice(list(MATMUL_FORMS)), chain, scale, rng.choice((FP16, BF16)))
        else:
            yield matvec_pair(rng, random_chain(rng, rng.choice((0, 1, 2))))


# ---------------------------------------------------------------- convolution

CONV_KERNEL = """
// Direct convolution. A block owns COB output channels of one sample and 256 output pixels; the weights of those
// channels are staged in shared memory and every input tap is loaded once for all COB accumulators.
constexpr int COB = 4;

__global__ void __launch_bounds__(256) {stem}_kernel(const float* __restrict__ x, const float* __restrict__ w,
        const float* __restrict__ bias, float* __restrict__ y, int Ci, int H, int W, int Co, int KH, int KW,
        int OH, int OW, int stride, int pad_h, int pad_w, int dil) {{
    extern __shared__ float wsh[];
    const int groups_co = (Co + COB - 1) / COB;
    const int n = blockIdx.y / groups_co, co0 = (blockIdx.y % groups_co) * COB;
    const int taps = Ci * KH * KW;
    for (int i = threadIdx.x; i < COB * taps; i += blockDim.x) {{
        const int c = co0 + i / taps;
        wsh[i] = c < Co ? w[(long long)c * taps + i % taps] : 0.f;
    }}
    __syncthreads();
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= OH * OW) return;
    const int oh = p / OW, ow = p % OW;
    float acc[COB];
    #pragma unroll
    for (int c = 0; c < COB; ++c) acc[c] = 0.f;
    for (int ci = 0; ci < Ci; ++ci) {{
        const float* __restrict__ xc = x + ((long long)n * Ci + ci) * H * W;
        for (int kh = 0; kh < KH; ++kh) {{
            const int ih = oh * stride - pad_h + kh * dil;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; ++kw) {{
                const int iw = ow * stride - pad_w + kw * dil;
                if (iw < 0 || iw >= W) continue;
                const float xv = __ldg(xc + ih * W + iw);
                const int t = (ci * KH + kh) * KW + kw;
                #pragma unroll
                for (int c = 0; c < COB; ++c) acc[c] = fmaf(xv, wsh[c * taps + t], acc[c]);
            }}
        }}
    }}
    #pragma unroll
    for (int c = 0; c < COB; ++c) {{
        const int co = co0 + c;
        if (co >= Co) break;
        float v = acc[c]{bias_add};
{epilogue}
        y[((long long)n * Co + co) * OH * OW + p] = v;
    }}
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor w{bias_arg}, int64_t stride, int64_t pad, int64_t dil) {{
{checks}
    TORCH_CHECK(x.dim() == {nd} && w.dim() == {nd} && w.size(1) == x.size(1),
                "{stem}: expected x [N, C_in, ...] and weight [C_out, C_in, ...] of rank {nd}");
    const int N = (int)x.size(0), Ci = (int)x.size(1), Co = (int)w.size(0);
    const int H = {h_expr}, W = (int)x.size(-1), KH = {kh_expr}, KW = (int)w.size(-1);
    const int OH = (H + 2 * {pad_h} - (int)dil * (KH - 1) - 1) / (int)stride + 1;
    const int OW = (W + 2 * (int)pad - (int)dil * (KW - 1) - 1) / (int)stride + 1;
    TORCH_CHECK(OH > 0 && OW > 0, "{stem}: the kernel does not fit the padded input");
    const size_t smem = (size_t)COB * Ci * KH * KW * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "{stem}: C_in * kernel area too large for the shared-memory weight tile");
    auto y = torch::empty({out_shape}, x.options());
    if (y.numel() == 0) return y;
    dim3 grid((OH * OW + 255) / 256, N * ((Co + COB - 1) / COB));
    {stem}_kernel<<<grid, 256, smem, {stream}>>>(x.data_ptr<float>(), w.data_ptr<float>(), {bias_ptr}y.data_ptr<float>(),
        Ci, H, W, Co, KH, KW, OH, OW, (int)stride, {pad_h_arg}, (int)pad, (int)dil);
{launch_check}
    return y;
}}
"""

CONV2D_SHAPES = [  # N, Ci, H, W, Co, k
    (8, 3, 64, 64, 16, 3), (16, 8, 32, 32, 16, 3), (4, 16, 32, 32, 32, 3), (8, 4, 48, 48, 8, 5),
    (2, 32, 28, 28, 32, 3), (32, 3, 32, 32, 8, 3), (4, 8, 64, 64, 8, 1), (16, 16, 16, 16, 32, 3),
    (8, 3, 96, 96, 12, 7), (1, 64, 14, 14, 64, 3)]
CONV1D_SHAPES = [  # N, Ci, L, Co, k
    (16, 8, 1024, 16, 3), (32, 4, 512, 8, 5), (8, 16, 2048, 32, 3), (64, 3, 256, 16, 7), (4, 32, 4096, 32, 1),
    (16, 16, 512, 16, 9)]


def conv_pair(rng: random.Random, two_d: bool, bias: bool, chain: list) -> SeedPair:
    if two_d:
        n, ci, h, w, co, k = rng.choice(CONV2D_SHAPES)
        consts = {"batch_size": n, "in_channels": ci, "out_channels": co, "height": h, "width": w, "kernel_size": k}
        x_in = tensor_input(["batch_size", "in_channels", "height", "width"], FP32)
        w_shape = "out_channels, in_channels, kernel_size, kernel_size"
    else:
        n, ci, length, co, k = rng.choice(CONV1D_SHAPES)
        consts = {"batch_size": n, "in_channels": ci, "out_channels": co, "length": length, "kernel_size": k}
        x_in = tensor_input(["batch_size", "in_channels", "length"], FP32)
        w_shape = "out_channels, in_channels, kernel_size"
    stride = rng.choice((1, 1, 2))
    pad = rng.choice((0, k // 2))
    dil = 1 if k > 3 or rng.random() < 0.8 else 2
    op = "conv2d" if two_d else "conv1d"
    writer = draw_writer(rng)
    layer = writer.prefs[0] == "nn" or rng.random() < 0.25
    if layer:
        init = [f"self.conv = nn.Conv{'2' if two_d else '1'}d(in_channels, out_channels, kernel_size, stride={stride}, "
                f"padding={pad}, dilation={dil}, bias={bias})"]
        fwd = ["x = self.conv(x)"]
        refs = ["self.conv.weight"] + (["self.conv.bias"] if bias else []) + [str(stride), str(pad), str(dil)]
    else:
        init = [f"self.weight = nn.Parameter(torch.randn({w_shape}) * (in_channels * kernel_size{' * kernel_size' if two_d else ''}) ** -0.5)"]
        if bias:
            init.append("self.bias = nn.Parameter(0.1 * torch.randn(out_channels))")
        init += [f"self.stride = {stride}", f"self.padding = {pad}", f"self.dilation = {dil}"]
        fwd = [f"x = F.{op}(x, self.weight, {'self.bias' if bias else 'None'}, stride=self.stride, padding=self.padding, dilation=self.dilation)"]
        refs = ["self.weight"] + (["self.bias"] if bias else []) + ["self.stride", "self.padding", "self.dilation"]
    fwd += [f"x = {spelled(o.tag, 'x')}" for o in chain] + ["return x"]
    fused = bool(chain)
    stem = op + ("_bias" if bias else "") + ("_act" if chain else "")
    tensors = ["x", "w"] + (["bias"] if bias else [])
    body = CONV_KERNEL.format(
        stem=stem, bias_add=" + bias[co]" if bias else "", epilogue=chain_cuda(chain, "v", 8),
        bias_arg=", torch::Tensor bias" if bias else "", checks=host_checks(stem, tensors, FP32), nd=4 if two_d else 3,
        h_expr="(int)x.size(2)" if two_d else "1", kh_expr="(int)w.size(2)" if two_d else "1",
        pad_h="(int)pad" if two_d else "0", pad_h_arg="(int)pad" if two_d else "0",
        out_shape="{N, Co, OH, OW}" if two_d else "{N, Co, OW}", bias_ptr="bias.data_ptr<float>(), " if bias else "",
        stream=STREAM, launch_check=LAUNCH_CHECK)
    if not bias:  # the kernel body always reads `bias`; without one, pass a null pointer it never dereferences
        body = body.replace("y.data_ptr<float>(),\n        Ci", "nullptr, y.data_ptr<float>(),\n        Ci")
    init_params = ["in_channels", "out_channels", "kernel_size"]
    problem = ProblemSpec(doc=f"{op} (stride {stride}, padding {pad}, dilation {dil})" +
                          (f" followed by {chain_doc(chain)}" if chain else ""),
                          init_params=init_params, init_body="\n".join(init), forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts, inputs=[x_in], init_inputs=init_params,
                          writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(), init_params=init_params,
                              init_body="\n".join(init), forward_params=["x"],
                              forward_body=f"return _ext_.{stem}({', '.join(['x.contiguous()'] + refs)})")
    fams = [op, "conv"] + (["bias"] if bias else []) + chain_tags(chain)
    comp = ">".join(filter(None, [op, "bias" if bias else "", chain_signature(chain)]))
    return make_pair(rng, "conv_epilogue" if fused else op, fams, 2 if fused else 1, comp, FP32, problem, candidate,
                     "direct_conv")


DEPTHWISE_KERNEL = """
// Depthwise conv2d: one thread per output pixel, the channel's k x k filter read through the read-only cache.
__global__ void {stem}_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                              float* __restrict__ y, int C, int H, int W, int K, int OH, int OW, int stride, int pad,
                              long long total) {{
    const long long stride_all = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride_all) {{
        const int ow = i % OW, oh = (i / OW) % OH;
        const long long nc = i / ((long long)OH * OW);
        const int c = nc % C;
        const float* __restrict__ xc = x + nc * H * W;
        const float* __restrict__ wc = w + (long long)c * K * K;
        float acc = 0.f;
        for (int kh = 0; kh < K; ++kh) {{
            const int ih = oh * stride - pad + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < K; ++kw) {{
                const int iw = ow * stride - pad + kw;
                if (iw >= 0 && iw < W) acc = fmaf(__ldg(xc + ih * W + iw), __ldg(wc + kh * K + kw), acc);
            }}
        }}
        float v = acc + bias[c];
{epilogue}
        y[i] = v;
    }}
}}

torch::Tensor {stem}(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t stride, int64_t pad) {{
{checks}
    TORCH_CHECK(x.dim() == 4 && w.dim() == 4 && w.size(0) == x.size(1) && w.size(1) == 1,
                "{stem}: expected x [N, C, H, W] and weight [C, 1, k, k]");
    const int N = (int)x.size(0), C = (int)x.size(1), H = (int)x.size(2), W = (int)x.size(3), K = (int)w.size(2);
    const int OH = (H + 2 * (int)pad - K) / (int)stride + 1, OW = (W + 2 * (int)pad - K) / (int)stride + 1;
    auto y = torch::empty({{N, C, OH, OW}}, x.options());
    const long long total = y.numel();
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>(x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(),
        y.data_ptr<float>(), C, H, W, K, OH, OW, (int)stride, (int)pad, total);
{launch_check}
    return y;
}}
"""


def depthwise_pair(rng: random.Random, chain: list) -> SeedPair:
    n, c, h, w = rng.choice([(8, 32, 56, 56), (16, 64, 28, 28), (4, 128, 32, 32), (32, 16, 64, 64), (2, 256, 14, 14)])
    k = rng.choice((3, 5, 7))
    stride = rng.choice((1, 2))
    pad = k // 2
    consts = {"batch_size": n, "channels": c, "height": h, "width": w, "kernel_size": k}
    writer = draw_writer(rng)
    if writer.prefs[0] == "nn" or rng.random() < 0.25:
        init = [f"self.conv = nn.Conv2d(channels, channels, kernel_size, stride={stride}, padding={pad}, groups=channels)"]
        fwd = ["x = self.conv(x)"]
        refs = ["self.conv.weight", "self.conv.bias", str(stride), str(pad)]
    else:
        init = ["self.weight = nn.Parameter(torch.randn(channels, 1, kernel_size, kernel_size) / kernel_size)",
                "self.bias = nn.Parameter(0.1 * torch.randn(channels))", f"self.stride = {stride}",
                f"self.padding = {pad}"]
        fwd = ["x = F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding, groups=x.shape[1])"]
        refs = ["self.weight", "self.bias", "self.stride", "self.padding"]
    fwd += [f"x = {spelled(o.tag, 'x')}" for o in chain] + ["return x"]
    stem = "depthwise_conv2d" + ("_act" if chain else "")
    body = DEPTHWISE_KERNEL.format(stem=stem, epilogue=chain_cuda(chain, "v", 8),
                                   checks=host_checks(stem, ["x", "w", "bias"], FP32), grid=grid_1d("total"),
                                   stream=STREAM, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="depthwise conv2d" + (f" followed by {chain_doc(chain)}" if chain else ""),
                          init_params=["channels", "kernel_size"], init_body="\n".join(init), forward_params=["x"],
                          forward_body="\n".join(fwd), constants=consts,
                          inputs=[tensor_input(["batch_size", "channels", "height", "width"], FP32)],
                          init_inputs=["channels", "kernel_size"], writer=writer)
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(), init_params=["channels", "kernel_size"],
                              init_body="\n".join(init), forward_params=["x"],
                              forward_body=f"return _ext_.{stem}({', '.join(['x.contiguous()'] + refs)})")
    return make_pair(rng, "depthwise_conv2d", ["depthwise_conv2d", "conv"] + chain_tags(chain), 2 if chain else 1,
                     ">".join(filter(None, ["depthwise_conv2d", chain_signature(chain)])), FP32, problem, candidate,
                     "grid_stride")


def gen_conv(rng: random.Random) -> Iterator[SeedPair]:
    while True:
        chain = random_chain(rng, rng.choice((0, 1, 1, 2, 2, 3)))
        if rng.random() < 0.2:
            yield depthwise_pair(rng, chain)
        else:
            yield conv_pair(rng, rng.random() < 0.6, rng.random() < 0.85, chain)


# ---------------------------------------------------------------- pooling

POOL_KERNEL = """
// One thread per output element; padded taps are skipped (max) or counted as zeros (avg, count_include_pad).
__global__ void {stem}_kernel(const float* __restrict__ x, float* __restrict__ y, int H, int W, int OH, int OW,
                              int K, int stride, int pad, long long total) {{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {{
        const int ow = i % OW, oh = (i / OW) % OH;
        const float* __restrict__ xc = x + (i / ((long long)OH * OW)) * H * W;
        float acc = {init};
        for (int kh = 0; kh < {kh}; ++kh) {{
            const int ih = oh * stride - pad + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < K; ++kw) {{
                const int iw = ow * stride - pad + kw;
                if (iw < 0 || iw >= W) continue;
                float v = __ldg(xc + ih * W + iw);
{pre}
                acc = {combine};
            }}
        }}
        float v = {finish};
{post}
        y[i] = v;
    }}
}}

torch::Tensor {stem}(torch::Tensor x, int64_t K, int64_t stride, int64_t pad) {{
{checks}
    TORCH_CHECK(x.dim() == {nd}, "{stem}: expected a rank-{nd} input");
    const int H = {h_expr}, W = (int)x.size(-1);
    const int OH = {oh_expr}, OW = (W + 2 * (int)pad - (int)K) / (int)stride + 1;
    TORCH_CHECK(OW > 0 && OH > 0, "{stem}: the window does not fit the padded input");
    auto shape = x.sizes().vec();
{shape_update}
    auto y = torch::empty(shape, x.options());
    const long long total = y.numel();
    if (total == 0) return y;
    {stem}_kernel<<<{grid}, 256, 0, {stream}>>>(x.data_ptr<float>(), y.data_ptr<float>(), H, W, OH, OW, (int)K,
        (int)stride, (int)pad, total);
{launch_check}
    return y;
}}
"""


def pool_pair(rng: random.Random, kind: str, two_d: bool, pre: list, post: list) -> SeedPair:
    k = rng.choice((2, 3, 4) if two_d else (2, 3, 4, 5, 8))
    stride = rng.choice((k, 1, 2)) if k > 1 else 1
    pad = rng.choice((0, k // 2)) if k > 1 else 0
    if two_d:
        n, c, h, w = rng.choice([(16, 32, 64, 64), (8, 64, 56, 56), (32, 16, 32, 32), (4, 128, 28, 28), (64, 3, 128, 128)])
        consts = {"batch_size": n, "channels": c, "height": h, "width": w}
        dims = ["batch_size", "channels", "height", "width"]
    else:
        n, c, length = rng.choice([(32, 64, 1024), (16, 128, 512), (64, 32, 2048), (8, 16, 8192)])
        consts = {"batch_size": n, "channels": c, "length": length}
        dims = ["batch_size", "channels", "length"]
    op = f"{kind}_pool{'2d' if two_d else '1d'}"
    fwd = [f"x = {spelled(o.tag, 'x')}" for o in pre] + [f"x = {spelled(op, 'x', k=k, s=stride, p=pad)}"]
    fwd += [f"x = {spelled(o.tag, 'x')}" for o in post] + ["return x"]
    area = k * k if two_d else k
    init, combine = ("-INFINITY", "fmaxf(acc, v)") if kind == "max" else ("0.f", "acc + v")
    finish = "acc" if kind == "max" else f"acc / {cf(float(area))}"
    fused = bool(pre or post)
    stem = op + ("_fused" if fused else "")
    shape_update = ("    shape[shape.size() - 2] = OH;\n    shape.back() = OW;" if two_d else "    shape.back() = OW;")
    body = POOL_KERNEL.format(
        stem=stem, init=init, kh="K" if two_d else "1", pre=chain_cuda(pre, "v", 16), combine=combine, finish=finish,
        post=chain_cuda(post, "v", 8), checks=host_checks(stem, ["x"], FP32), nd=4 if two_d else 3,
        h_expr="(int)x.size(-2)" if two_d else "1",
        oh_expr="(H + 2 * (int)pad - (int)K) / (int)stride + 1" if two_d else "1", shape_update=shape_update,
        grid=grid_1d("total"), stream=STREAM, launch_check=LAUNCH_CHECK)
    if not two_d:
        # a 1-d window has no vertical padding: the single input row is row 0
        body = body.replace("const int ih = oh * stride - pad + kh;", "const int ih = kh;")
        body = body.replace("const int ow = i % OW, oh = (i / OW) % OH;", "const int ow = i % OW;")
    problem = ProblemSpec(doc=f"{op.replace('_', ' ')} (kernel {k}, stride {stride}, padding {pad})" +
                          (f" with {chain_doc(pre + post)} fused in" if fused else ""),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants=consts, inputs=[tensor_input(dims, FP32)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(), init_params=[], init_body="",
                              forward_params=["x"], forward_body=f"return _ext_.{stem}(x.contiguous(), {k}, {stride}, {pad})")
    comp = ">".join(filter(None, [chain_signature(pre), op, chain_signature(post)]))
    return make_pair(rng, op, [op, "pooling"] + chain_tags(pre) + chain_tags(post), 2 if fused else 1, comp, FP32,
                     problem, candidate, "thread_per_output")


GLOBAL_POOL_WARP = """
// Global average pool: one warp per (sample, channel) plane, warp-shuffle sum.
__global__ void {stem}_kernel(const float* __restrict__ x, float* __restrict__ y, long long planes, int HW) {{
    const long long plane = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (plane >= planes) return;
    const float* __restrict__ p = x + plane * HW;
    float s = 0.f;
    for (int i = lane; i < HW; i += 32) {{
        float v = p[i];
{pre}
        s += v;
    }}
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == 0) {{
        float v = s / (float)HW;
{post}
        y[plane] = v;
    }}
}}
"""

GLOBAL_POOL_BLOCK = """
// Global average pool: one block per (sample, channel) plane, block reduction of the plane.
__global__ void {stem}_kernel(const float* __restrict__ x, float* __restrict__ y, long long planes, int HW) {{
    const long long plane = blockIdx.x;
    const float* __restrict__ p = x + plane * HW;
    float s = 0.f;
    for (int i = threadIdx.x; i < HW; i += blockDim.x) {{
        float v = p[i];
{pre}
        s += v;
    }}
    s = block_sum(s);
    if (threadIdx.x == 0) {{
        float v = s / (float)HW;
{post}
        y[plane] = v;
    }}
}}
"""

GLOBAL_POOL_HOST = """
torch::Tensor {stem}(torch::Tensor x) {{
{checks}
    TORCH_CHECK(x.dim() == 4, "{stem}: expected [N, C, H, W]");
    const long long planes = x.size(0) * x.size(1);
    const int HW = (int)(x.size(2) * x.size(3));
    auto y = torch::empty({{x.size(0), x.size(1)}}, x.options());
    if (planes == 0) return y;
    {stem}_kernel<<<{grid}, {threads}, 0, {stream}>>>(x.data_ptr<float>(), y.data_ptr<float>(), planes, HW);
{launch_check}
    return y;
}}
"""


def global_pool_pair(rng: random.Random, pre: list, post: list) -> SeedPair:
    n, c, h, w = rng.choice([(32, 256, 14, 14), (64, 512, 7, 7), (16, 128, 28, 28), (8, 64, 56, 56), (128, 64, 8, 8)])
    fwd = [f"x = {spelled(o.tag, 'x')}" for o in pre] + [f"x = {spelled('global_avg_pool', 'x')}"]
    fwd += [f"x = {spelled(o.tag, 'x')}" for o in post] + ["return x"]
    fused = bool(pre or post)
    stem = "global_avg_pool" + ("_fused" if fused else "")
    block = h * w >= 784 and rng.random() < 0.6
    flavour = rng.choice(["warp_shuffle", "smem_tree", "cub"]) if block else None
    threads = rng.choice((128, 256)) if block else 256
    template = GLOBAL_POOL_BLOCK if block else GLOBAL_POOL_WARP
    body = template.format(stem=stem, pre=chain_cuda(pre, "v", 8), post=chain_cuda(post, "v", 8)) + \
        GLOBAL_POOL_HOST.format(stem=stem, checks=host_checks(stem, ["x"], FP32),
                                grid="(unsigned)planes" if block else "(unsigned)((planes + 7) / 8)", threads=threads,
                                stream=STREAM, launch_check=LAUNCH_CHECK)
    problem = ProblemSpec(doc="global average pooling over H and W" + (f" with {chain_doc(pre + post)} fused in" if fused else ""),
                          init_params=[], init_body="", forward_params=["x"], forward_body="\n".join(fwd),
                          constants={"batch_size": n, "channels": c, "height": h, "width": w},
                          inputs=[tensor_input(["batch_size", "channels", "height", "width"], FP32)], init_inputs=[])
    candidate = CandidateSpec(stem=stem, cuda_body=body, prelude=float_prelude(flavour, threads if flavour == "cub" else None),
                              init_params=[], init_body="", forward_params=["x"],
                              forward_body=f"return _ext_.{stem}(x.contiguous())")
    comp = ">".join(filter(None, [chain_signature(pre), "global_avg_pool", chain_signature(post)]))
    return make_pair(rng, "global_avg_pool", ["global_avg_pool", "pooling", "reduction"] + chain_tags(pre) + chain_tags(post),
                     2 if fused else 1, comp, FP32, problem, candidate, flavour or "warp_per_row")


def gen_pool(rng: random.Random) -> Iterator[SeedPair]:
    monotone = ["relu", "sigmoid", "tanh", "scale", "shift", "hardtanh", "gelu", "silu", "abs"]
    while True:
        r = rng.random()
        pre = random_chain(rng, rng.choice((0, 0, 1)), monotone)
        post = random_chain(rng, rng.choice((0, 1, 1, 2)))
        if r < 0.15:
            yield global_pool_pair(rng, pre, post)
        else:
            yield pool_pair(rng, "max" if r < 0.6 else "avg", rng.random() < 0.6, pre, post)


GENERATORS = {
    "gemm": (gen_gemm, 1500),
    "conv": (gen_conv, 700),
    "pooling": (gen_pool, 450),
}
