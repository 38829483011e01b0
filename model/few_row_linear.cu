// y = x @ W^T for a few rows of x (a decoding pass: up to 16 token rows), bf16, as streaming tensor-core kernels.
//
// Why: at 8 token rows a projection is a weight-streaming problem, and cuBLAS reached 1.1-2.6 TB/s of the H200's
// 4.2 on the DICE-1.7B shapes (BENCHMARKS.md, decode runs 5 and 7), plus a separate kernel for each residual add
// and SiLU·up. Here the weight matrix is the mma's A operand (16 weight rows x 16 k) and the token rows its B
// operand (n = 8 tokens), so every weight byte is read once, straight from global memory into registers with
// 16-byte loads, and the epilogue adds the residual or applies SiLU·up before the only store.
//
// The k order inside a 32-wide step is permuted: thread t of a quad loads elements 8t..8t+7 of its weight rows
// and of its token row, and feeds pairs 0-1 to the first mma and 2-3 to the second. A and B see the same
// permutation, so the dot products are unchanged, and no shared memory or ldmatrix is needed.
//
// NORM: x is first RMS-normalised with norm_weight, as the layer's norm before q/k/v and before gate/up. Each
// warp loads only its k range of x, so it sums the squares of what it loaded, feeds bf16(x * norm_weight) to the
// mma, and the CTA scales each token's sums by 1 / rms(x) in the epilogue: no extra pass over x, no norm kernel.
//
// Each CTA takes TILES tiles of 16 weight rows over the whole K, split among WARPS warps (contiguous k ranges),
// and sums the warps' partial tiles in shared memory. With programmatic dependent launch the first weight loads
// are issued before griddepcontrol.wait: in a forward the kernel before is an attention, rotary or projection
// kernel, never one that writes weights; only x and the residual depend on it. (A caller that updates weights
// with a kernel must not launch these right after it.) Measured on the H200: BENCHMARKS.md, decode run 14.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int EPILOGUE_NONE = 0;      // out[m, n] = y[m, n]
constexpr int EPILOGUE_RESIDUAL = 1;  // out[m, n] = residual[m, n] + y[m, n]
constexpr int EPILOGUE_SILU_MUL = 2;  // W = [gate; up] (2 * n_out rows): out[m, j] = silu(y[m, j]) * y[m, n_out + j]


__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Weights are read once per pass: no L1 allocation, non-coherent path.
__device__ __forceinline__ uint4 load_streaming(const __nv_bfloat16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_16x8x16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// Accumulator element e of an m16n8k16 mma's lane: its fragment row (a weight row of the tile) and its token in
// 8-token column j.
__device__ __forceinline__ int fragment_row(int lane, int e) { return (lane >> 2) + (e >= 2 ? 8 : 0); }
__device__ __forceinline__ int fragment_token(int lane, int e, int j) { return j * 8 + 2 * (lane & 3) + (e & 1); }

// SiLU·up as the unfused model: gate and up rounded to bf16, SiLU·up in fp32, rounded once.
__device__ __forceinline__ __nv_bfloat16 silu_mul(float gate, float up) {
  gate = round_bf16(gate);
  return __float2bfloat16(gate / (1.f + __expf(-gate)) * round_bf16(up));
}

// x * weight for 8 bf16 packed in a uint4 (the mma operand), adding x's squares (fp32) to sum_squares.
__device__ __forceinline__ uint4 scale_by_norm_weight(uint4 x, uint4 weight, float& sum_squares) {
  uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ws[4] = {weight.x, weight.y, weight.z, weight.w}, out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 xf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xs[i]));
    const float2 wf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ws[i]));
    sum_squares += xf.x * xf.x + xf.y * xf.y;
    const __nv_bfloat162 scaled = __floats2bfloat162_rn(xf.x * wf.x, xf.y * wf.y);
    out[i] = *reinterpret_cast<const uint32_t*>(&scaled);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__device__ __forceinline__ void consumers_sync();

// Each token's 1 / rms(x) into token_scale[token] (by the first NT * 8 threads) from the threads' sums of squares
// of its x: thread (g, t) of a warp holds token j * 8 + g's share in sum_squares[j]; summed over the quad, then
// over the warps in warp_squares[WARPS * NT * 8]. CONSUMERS: only a chain's consumer warps take part.
template <int NT, int WARPS, bool CONSUMERS>
__device__ __forceinline__ void token_scales(const float (&sum_squares)[NT], float* warp_squares, float* token_scale,
                                             int k, float eps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    float s = sum_squares[j];  // the quad's four threads hold the same token's other k
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if ((lane & 3) == 0) warp_squares[(warp * NT + j) * 8 + (lane >> 2)] = s;
  }
  if (CONSUMERS)
    consumers_sync();
  else
    __syncthreads();
  if (threadIdx.x < NT * 8) {
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < WARPS; ++v) s += warp_squares[v * NT * 8 + threadIdx.x];
    token_scale[threadIdx.x] = rsqrtf(s / k + eps);
  }
}

// Weight row behind fragment row r (0..15) of tile `tile`.
template <int EPILOGUE>
__device__ __forceinline__ int weight_row(int tile, int r, int n_out) {
  if (EPILOGUE == EPILOGUE_SILU_MUL) return r < 8 ? tile * 8 + r : n_out + tile * 8 + r - 8;
  return tile * 16 + r;
}

template <int EPILOGUE, bool NORM, int TILES, int WARPS, int NT>
__global__ void __launch_bounds__(WARPS * 32) few_row_linear_kernel(
    const __nv_bfloat16* __restrict__ x, int64_t x_stride, const __nv_bfloat16* __restrict__ w,
    const __nv_bfloat16* __restrict__ residual, int64_t residual_stride, const __nv_bfloat16* __restrict__ norm_weight,
    float eps, __nv_bfloat16* __restrict__ out, int64_t out_stride, int rows, int k, int n_out) {
  // 32-wide k steps whose loads are in flight together per warp: 8 KiB of weights whatever TILES is.
  constexpr int UNROLL = 8 / TILES;
  __shared__ float partial[WARPS][TILES][NT][32][4];
  __shared__ float token_scale[NT * 8];  // NORM: 1 / rms of each token's x
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int first_tile = blockIdx.x * TILES;
  const int steps = k / 32;
  const int step_begin = warp * steps / WARPS, step_end = (warp + 1) * steps / WARPS;

  const __nv_bfloat16* w_rows[TILES][2];
#pragma unroll
  for (int i = 0; i < TILES; ++i) {
    w_rows[i][0] = w + (int64_t)weight_row<EPILOGUE>(first_tile + i, g, n_out) * k + t * 8;
    w_rows[i][1] = w + (int64_t)weight_row<EPILOGUE>(first_tile + i, g + 8, n_out) * k + t * 8;
  }
  const __nv_bfloat16* x_rows[NT];
  bool x_real[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    x_real[j] = j * 8 + g < rows;
    x_rows[j] = x + (int64_t)(x_real[j] ? j * 8 + g : 0) * x_stride + t * 8;
  }

  float acc[TILES][NT][4];
#pragma unroll
  for (int i = 0; i < TILES; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  float sum_squares[NT] = {};  // NORM: of this thread's elements of token j * 8 + g

  uint4 wv[UNROLL][TILES][2];
  auto load_weights = [&](int step) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (step + u < step_end)
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
          wv[u][i][0] = load_streaming(w_rows[i][0] + (step + u) * 32);
          wv[u][i][1] = load_streaming(w_rows[i][1] + (step + u) * 32);
        }
  };

  load_weights(step_begin);
  wait_for_previous_kernel();
  // The next kernel may start now: its CTAs fill SMs as ours leave and load their weights before they wait.
  let_next_kernel_launch();
  for (int step = step_begin; step < step_end; step += UNROLL) {
    uint4 xv[UNROLL][NT];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < NT; ++j)
        xv[u][j] = (step + u < step_end && x_real[j])
                       ? *reinterpret_cast<const uint4*>(x_rows[j] + (step + u) * 32)
                       : make_uint4(0, 0, 0, 0);
    if (NORM)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const uint4 weight = step + u < step_end
                                 ? *reinterpret_cast<const uint4*>(norm_weight + t * 8 + (step + u) * 32)
                                 : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < NT; ++j) xv[u][j] = scale_by_norm_weight(xv[u][j], weight, sum_squares[j]);
      }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (step + u < step_end)
#pragma unroll
        for (int i = 0; i < TILES; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            mma_16x8x16(acc[i][j], wv[u][i][0].x, wv[u][i][1].x, wv[u][i][0].y, wv[u][i][1].y, xv[u][j].x,
                        xv[u][j].y);
            mma_16x8x16(acc[i][j], wv[u][i][0].z, wv[u][i][1].z, wv[u][i][0].w, wv[u][i][1].w, xv[u][j].z,
                        xv[u][j].w);
          }
    if (step + UNROLL < step_end) load_weights(step + UNROLL);
  }

#pragma unroll
  for (int i = 0; i < TILES; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][i][j][lane][e] = acc[i][j][e];
  if (NORM) {
    __shared__ float warp_squares[WARPS * NT * 8];
    token_scales<NT, WARPS, false>(sum_squares, warp_squares, token_scale, k, eps);
  }
  __syncthreads();

  // Accumulator element e of lane (g, t): fragment row g (+8 for e >= 2), token column 2t + (e & 1).
  constexpr int PAIRS = EPILOGUE == EPILOGUE_SILU_MUL ? 2 : 4;  // SiLU·up: a thread takes e and e + 2 together
  for (int index = threadIdx.x; index < TILES * NT * 32 * PAIRS; index += WARPS * 32) {
    const int e = index % PAIRS, src_lane = index / PAIRS % 32, j = index / PAIRS / 32 % NT;
    const int i = index / PAIRS / 32 / NT;
    const int token = fragment_token(src_lane, e, j);
    if (token >= rows) continue;
    const int r = fragment_row(src_lane, e);
    const float scale = NORM ? token_scale[token] : 1.f;
    float y = 0.f;
#pragma unroll
    for (int s = 0; s < WARPS; ++s) y += partial[s][i][j][src_lane][e];
    y *= scale;
    if (EPILOGUE == EPILOGUE_SILU_MUL) {
      float up = 0.f;
#pragma unroll
      for (int s = 0; s < WARPS; ++s) up += partial[s][i][j][src_lane][e + 2];
      up *= scale;
      const int feature = (first_tile + i) * 8 + r;
      out[token * out_stride + feature] = silu_mul(y, up);
    } else {
      const int feature = (first_tile + i) * 16 + r;
      float value = round_bf16(y);
      if (EPILOGUE == EPILOGUE_RESIDUAL) value += __bfloat162float(residual[token * residual_stride + feature]);
      out[token * out_stride + feature] = __float2bfloat16(value);
    }
  }
}

// The arguments every launch passes through.
struct Arguments {
  const void* x;
  int64_t x_stride;
  const void* w;
  const void* residual;
  int64_t residual_stride;
  const void* norm_weight;
  float eps;
  void* out;
  int64_t out_stride;
  int rows, k, n_out;
  bool pdl;
  cudaStream_t stream;
};

template <int EPILOGUE, bool NORM, int TILES, int WARPS, int NT>
cudaError_t launch(const Arguments& a) {
  // The norm's extra registers spill at 16 warps (128 registers a thread): not built.
  if constexpr (NORM && WARPS > 8) {
    return cudaErrorInvalidValue;
  } else {
    const int tiles = EPILOGUE == EPILOGUE_SILU_MUL ? a.n_out / 8 : a.n_out / 16;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(tiles / TILES);
    config.blockDim = dim3(WARPS * 32);
    config.stream = a.stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = a.pdl ? 1 : 0;
    using bf16 = __nv_bfloat16;
    return cudaLaunchKernelEx(&config, few_row_linear_kernel<EPILOGUE, NORM, TILES, WARPS, NT>,
                              static_cast<const bf16*>(a.x), a.x_stride, static_cast<const bf16*>(a.w),
                              static_cast<const bf16*>(a.residual), a.residual_stride,
                              static_cast<const bf16*>(a.norm_weight), a.eps, static_cast<bf16*>(a.out), a.out_stride,
                              a.rows, a.k, a.n_out);
  }
}

template <int EPILOGUE, bool NORM>
cudaError_t launch_shape(int tiles, int warps, const Arguments& a) {
  const bool two_columns = a.rows > 8;  // a second 8-token mma column
#define DICE_LAUNCH(TILES, WARPS)                                                \
  if (tiles == TILES && warps == WARPS)                                          \
    return two_columns ? launch<EPILOGUE, NORM, TILES, WARPS, 2>(a)              \
                       : launch<EPILOGUE, NORM, TILES, WARPS, 1>(a);
  DICE_LAUNCH(1, 8)
  DICE_LAUNCH(1, 16)
  DICE_LAUNCH(2, 4)
  DICE_LAUNCH(2, 8)
  DICE_LAUNCH(2, 16)
#undef DICE_LAUNCH
  return cudaErrorInvalidValue;
}

// ---- A chain of projections as one persistent kernel ----
//
// Between two projections of a layer the weight stream stops: the next kernel's CTAs start and load only as the
// last ones drain, and each projection pays that start and drain (BENCHMARKS.md, decode run 15: the four
// projections of a layer took 37.8 us against 23.8 at the copy rate). Weights never depend on activations, so
// here one CTA per SM streams every weight byte of a chain of projections through a ring of shared-memory stages
// with bulk copies (a producer warp), while 8 consumer warps run the mma on each stage as it lands; between two
// dependent projections the consumers wait at a grid barrier, the producer does not. The ring keeps filling
// through barriers, x loads and epilogues, so the stream only stops when the ring is full: with 13 stages (6.5 us
// of an SM's share of the bandwidth) and the mma left out, a chain took 25.6 us a layer with its grid barriers and
// 25.3 without (BENCHMARKS.md, decode run 16).
//
// Each projection's tiles (16 weight rows, as above) go round-robin over the CTAs, continuing from where the
// projection before ended, so the bytes a CTA streams even out over the chain. A tile's K is streamed in stages of
// CHAIN_STAGE_K; every consumer warp takes 2 of a stage's 16 k-steps, always the same ones, so each warp holds
// just its slices of x in registers (RMS-normalised there when the projection has the norm), loaded once per
// projection. The warps' partial tiles are summed in shared memory and the epilogue is the one above.

constexpr int CHAIN_CONSUMER_WARPS = 8;
constexpr int CHAIN_THREADS = (CHAIN_CONSUMER_WARPS + 1) * 32;  // the last warp is the producer
constexpr int CHAIN_STAGE_K = 512;  // 1024 (2 KB copies, half the stage handshakes) ran slower
constexpr int CHAIN_STEPS_PER_WARP = CHAIN_STAGE_K / 32 / CHAIN_CONSUMER_WARPS;
// x held per thread: K / 256 k-steps of 16 bytes for each 8-token column. K = 6144 at 8 tokens (96 registers) is
// the most that fits.
constexpr int CHAIN_MAX_X_STEPS = 24;
// A stage row is padded by 64 bytes: fragment rows g and g + 1 then fall in different halves of the banks.
constexpr int CHAIN_STAGE_ROW_BYTES = CHAIN_STAGE_K * 2 + 64;
constexpr int CHAIN_STAGE_BYTES = 16 * CHAIN_STAGE_ROW_BYTES;
constexpr int CHAIN_MAX_STAGES = 16;
constexpr int CHAIN_MAX_PHASES = 128;

// One projection of a chain: out = epilogue(norm(x) @ w^T), as few_row_linear_kernel.
struct ChainPhase {
  const __nv_bfloat16* w;
  const __nv_bfloat16* x;
  const __nv_bfloat16* residual;
  const __nv_bfloat16* norm_weight;  // null: no norm
  __nv_bfloat16* out;
  int64_t x_stride, residual_stride, out_stride;
  float eps;
  int k, n_out, epilogue;
};

template <int MAX_PHASES>
struct ChainProgram {
  ChainPhase phase[MAX_PHASES];
  int n_phases;
};

// What a chain keeps in device memory between launches (zeroed once): its grid barrier's count of arrivals. It only
// grows (64 bits never wrap), so barrier m of all launches is passed when it reaches (m + 1) * CTAs.
struct ChainState {
  unsigned long long arrivals;
};

// Whether a chain of `rows` token rows takes this phase: K in whole stages, x of it in registers, whole tiles.
__host__ __device__ inline bool chain_phase_fits(const ChainPhase& phase, int rows) {
  const int columns = rows > 8 ? 2 : 1;
  return phase.k % CHAIN_STAGE_K == 0 && phase.k / (32 * CHAIN_CONSUMER_WARPS) * columns <= CHAIN_MAX_X_STEPS &&
         phase.n_out % 16 == 0;
}

__device__ __forceinline__ int chain_tiles(const ChainPhase& phase) {
  return phase.epilogue == EPILOGUE_SILU_MUL ? phase.n_out / 8 : phase.n_out / 16;
}

__device__ __forceinline__ int chain_weight_row(const ChainPhase& phase, int tile, int r) {
  return phase.epilogue == EPILOGUE_SILU_MUL ? weight_row<EPILOGUE_SILU_MUL>(tile, r, phase.n_out)
                                             : weight_row<EPILOGUE_NONE>(tile, r, phase.n_out);
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}

// Returns once the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CHAIN_CONSUMER_WARPS * 32) : "memory");
}

// All consumer threads of all CTAs; what any of them wrote before is visible (to L2 loads) to all after. One
// release atomic and then polling: under a full weight stream every L2 round trip takes about a microsecond, and a
// barrier that also read a generation, fenced and released a reset took 2.6-4.8 us from the last arrival to the
// first release (BENCHMARKS.md, decode run 16). The release and acquire are about 0.075 ms of a batch-1 forward
// (relaxed, a probe that is not correct, took 1.456 ms against 1.531); a correct version without them, readers
// polling sentinel-filled scratch rows, was 0.22 ms slower for a cause not found (run 20, `exp/sentinel-scratch`).
__device__ void grid_barrier(ChainState* state, unsigned n_ctas) {
  consumers_sync();
  if (threadIdx.x == 0) {
    unsigned long long arrived, now;
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(arrived) : "l"(&state->arrivals) : "memory");
    const unsigned long long passed = (arrived / n_ctas + 1) * n_ctas;
    do {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(&state->arrivals) : "memory");
    } while (now < passed);
  }
  consumers_sync();
}

// Which output of a tile consumer thread threadIdx.x writes (one each: 256 threads, at most 2 * 32 * 4 outputs):
// accumulator element e of lane src_lane in column j; fragment row r, token `token`. SiLU·up: e and e + 2.
struct EpilogueItem {
  int e, src_lane, j, r, token;
  bool active;
};

template <int NT>
__device__ __forceinline__ EpilogueItem epilogue_item(const ChainPhase& phase, int rows) {
  const int pairs = phase.epilogue == EPILOGUE_SILU_MUL ? 2 : 4;
  const int index = threadIdx.x;
  EpilogueItem item;
  item.e = index % pairs;
  item.src_lane = index / pairs % 32;
  item.j = index / pairs / 32;
  item.r = fragment_row(item.src_lane, item.e);
  item.token = fragment_token(item.src_lane, item.e, item.j);
  item.active = index < NT * 32 * pairs && item.token < rows;
  return item;
}

// The epilogue of one tile from the consumer warps' partial sums, as few_row_linear_kernel's; the residual was
// loaded before the tile's mma.
template <int NT>
__device__ __forceinline__ void chain_epilogue(const ChainPhase& phase, int tile, const EpilogueItem& item,
                                               float residual, const float (*partial)[NT][32][4],
                                               const float* token_scale) {
  if (!item.active) return;
  const float scale = phase.norm_weight != nullptr ? token_scale[item.token] : 1.f;
  float y = 0.f;
#pragma unroll
  for (int s = 0; s < CHAIN_CONSUMER_WARPS; ++s) y += partial[s][item.j][item.src_lane][item.e];
  y *= scale;
  if (phase.epilogue == EPILOGUE_SILU_MUL) {
    float up = 0.f;
#pragma unroll
    for (int s = 0; s < CHAIN_CONSUMER_WARPS; ++s) up += partial[s][item.j][item.src_lane][item.e + 2];
    up *= scale;
    phase.out[item.token * phase.out_stride + tile * 8 + item.r] = silu_mul(y, up);
  } else {
    phase.out[item.token * phase.out_stride + tile * 16 + item.r] = __float2bfloat16(round_bf16(y) + residual);
  }
}

// What the ring and the consumers share.
struct ChainShared {
  char* ring;
  uint64_t* stage_full;
  uint64_t* stage_free;
  int n_stages;
};

// A consumer's place in the ring.
struct RingPosition {
  int stage = 0;
  unsigned parity = 0;
  __device__ void advance(int n_stages) {
    if (++stage == n_stages) stage = 0, parity ^= 1;
  }
};

// The consumers' part of one phase with K = STAGES * CHAIN_STAGE_K: this CTA's tiles from `first` on.
template <int NT, int STAGES>
__device__ void consume_phase(const ChainPhase& phase, int rows, int first, int n_ctas, const ChainShared& ring,
                              RingPosition& position, int& tiles_done, float (*partial)[CHAIN_CONSUMER_WARPS][NT][32][4],
                              float* token_scale, float* warp_squares) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const bool norm = phase.norm_weight != nullptr;
  // This warp's k-slices of x, all loads in flight at once; x was written by the kernel before or by other CTAs
  // before the grid barrier: read from L2.
  uint4 xv[STAGES][CHAIN_STEPS_PER_WARP][NT];
#pragma unroll
  for (int c = 0; c < STAGES; ++c)
#pragma unroll
    for (int i = 0; i < CHAIN_STEPS_PER_WARP; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int token = j * 8 + g, k = c * CHAIN_STAGE_K + (warp * CHAIN_STEPS_PER_WARP + i) * 32 + t * 8;
        xv[c][i][j] = token < rows ? __ldcg(reinterpret_cast<const uint4*>(phase.x + token * phase.x_stride + k))
                                   : make_uint4(0, 0, 0, 0);
      }
  if (norm) {
    float sum_squares[NT] = {};
#pragma unroll
    for (int c = 0; c < STAGES; ++c)
#pragma unroll
      for (int i = 0; i < CHAIN_STEPS_PER_WARP; ++i) {
        const int k = c * CHAIN_STAGE_K + (warp * CHAIN_STEPS_PER_WARP + i) * 32 + t * 8;
        const uint4 weight = *reinterpret_cast<const uint4*>(phase.norm_weight + k);
#pragma unroll
        for (int j = 0; j < NT; ++j) xv[c][i][j] = scale_by_norm_weight(xv[c][i][j], weight, sum_squares[j]);
      }
    token_scales<NT, CHAIN_CONSUMER_WARPS, true>(sum_squares, warp_squares, token_scale, phase.k, phase.eps);
  }
  const EpilogueItem item = epilogue_item<NT>(phase, rows);
  for (int tile = first; tile < chain_tiles(phase); tile += n_ctas) {
    // Issued now, used after the tile's mma: the epilogue does not wait on L2.
    const float residual =
        item.active && phase.epilogue == EPILOGUE_RESIDUAL
            ? __bfloat162float(__ldcg(phase.residual + item.token * phase.residual_stride + tile * 16 + item.r))
            : 0.f;
    // One accumulator per mma of a stage: their chains run side by side, summed after the last stage.
    float acc[CHAIN_STEPS_PER_WARP][2][NT][4] = {};
#pragma unroll
    for (int c = 0; c < STAGES; ++c) {
      mbarrier_wait(&ring.stage_full[position.stage], position.parity);
      const char* a = ring.ring + position.stage * CHAIN_STAGE_BYTES;
#pragma unroll
      for (int i = 0; i < CHAIN_STEPS_PER_WARP; ++i) {
        const int step = warp * CHAIN_STEPS_PER_WARP + i;
        const uint4 a0 = *reinterpret_cast<const uint4*>(a + g * CHAIN_STAGE_ROW_BYTES + step * 64 + t * 16);
        const uint4 a1 = *reinterpret_cast<const uint4*>(a + (g + 8) * CHAIN_STAGE_ROW_BYTES + step * 64 + t * 16);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_16x8x16(acc[i][0][j], a0.x, a1.x, a0.y, a1.y, xv[c][i][j].x, xv[c][i][j].y);
          mma_16x8x16(acc[i][1][j], a0.z, a1.z, a0.w, a1.w, xv[c][i][j].z, xv[c][i][j].w);
        }
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&ring.stage_free[position.stage]);
      position.advance(ring.n_stages);
    }
    float (*mine)[NT][32][4] = partial[tiles_done & 1];  // two in turn: the next tile's writes need no sync
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < CHAIN_STEPS_PER_WARP; ++i) sum += acc[i][0][j][e] + acc[i][1][j][e];
        mine[warp][j][lane][e] = sum;
      }
    consumers_sync();
    chain_epilogue<NT>(phase, tile, item, residual, mine, token_scale);
    ++tiles_done;
  }
}

template <int NT, int MAX_PHASES>
__global__ void __launch_bounds__(CHAIN_THREADS, 1)
    projection_chain_kernel(const __grid_constant__ ChainProgram<MAX_PHASES> program, int rows, int n_stages,
                            ChainState* state) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // bulk copies and mbarrier waits need Hopper; chain_available checks the GPU (few_row_linear.py)
#else
  extern __shared__ __align__(128) char shared[];
  __shared__ uint64_t stage_full[CHAIN_MAX_STAGES], stage_free[CHAIN_MAX_STAGES];
  __shared__ float token_scale[16], warp_squares[CHAIN_CONSUMER_WARPS * 16];
  const ChainShared ring{shared, stage_full, stage_free, n_stages};
  auto partial = reinterpret_cast<float (*)[CHAIN_CONSUMER_WARPS][NT][32][4]>(shared + n_stages * CHAIN_STAGE_BYTES);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_ctas = gridDim.x;

  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) {
      mbarrier_init(&stage_full[s], 1);
      mbarrier_init(&stage_free[s], CHAIN_CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == CHAIN_CONSUMER_WARPS) {  // the producer: every weight byte of this CTA's tiles, in order
    RingPosition position;
    int offset = 0;  // the CTA that takes a phase's first tile
    for (int p = 0; p < program.n_phases; ++p) {
      const ChainPhase& phase = program.phase[p];
      const int tiles = chain_tiles(phase);
      for (int tile = (blockIdx.x - offset + n_ctas) % n_ctas; tile < tiles; tile += n_ctas) {
        const __nv_bfloat16* row = phase.w + (int64_t)chain_weight_row(phase, tile, lane & 15) * phase.k;
        for (int k0 = 0; k0 < phase.k; k0 += CHAIN_STAGE_K) {
          mbarrier_wait(&stage_free[position.stage], position.parity ^ 1);
          if (lane == 0) mbarrier_expect_bytes(&stage_full[position.stage], 16 * CHAIN_STAGE_K * 2);
          __syncwarp();
          if (lane < 16)
            bulk_copy_to_shared(shared + position.stage * CHAIN_STAGE_BYTES + lane * CHAIN_STAGE_ROW_BYTES, row + k0,
                                CHAIN_STAGE_K * 2, &stage_full[position.stage]);
          position.advance(n_stages);
        }
      }
      offset = (offset + tiles) % n_ctas;
    }
    return;
  }

  RingPosition position;
  int offset = 0, tiles_done = 0;
  wait_for_previous_kernel();
  for (int p = 0; p < program.n_phases; ++p) {
    const ChainPhase& phase = program.phase[p];
    if (p > 0) grid_barrier(state, n_ctas);
    // Every CTA is resident now (all reached the barrier): the next kernel may take the room left.
    if (p == 1) let_next_kernel_launch();
    const int tiles = chain_tiles(phase);
    const int first = (blockIdx.x - offset + n_ctas) % n_ctas;
    offset = (offset + tiles) % n_ctas;
    if (first >= tiles) continue;
    switch (phase.k / CHAIN_STAGE_K) {
#define DICE_CONSUME(STAGES)                                                                                  \
  case STAGES:                                                                                                \
    if constexpr (NT * STAGES * CHAIN_STEPS_PER_WARP <= CHAIN_MAX_X_STEPS)                                    \
      consume_phase<NT, STAGES>(phase, rows, first, n_ctas, ring, position, tiles_done, partial, token_scale, \
                                warp_squares);                                                                \
    break;
      DICE_CONSUME(1) DICE_CONSUME(2) DICE_CONSUME(3) DICE_CONSUME(4) DICE_CONSUME(5) DICE_CONSUME(6)
      DICE_CONSUME(7) DICE_CONSUME(8) DICE_CONSUME(9) DICE_CONSUME(10) DICE_CONSUME(11) DICE_CONSUME(12)
#undef DICE_CONSUME
    }
    consumers_sync();  // token_scale and warp_squares are rewritten by the next projection
  }
  if (program.n_phases == 1) let_next_kernel_launch();
#endif
}

template <int NT, int MAX_PHASES>
cudaError_t launch_chain(const ChainPhase* phases, int n_phases, int rows, ChainState* state, bool pdl,
                         cudaStream_t stream) {
  ChainProgram<MAX_PHASES> program = {};
  for (int p = 0; p < n_phases; ++p) {
    if (!chain_phase_fits(phases[p], rows)) return cudaErrorInvalidValue;
    program.phase[p] = phases[p];
  }
  program.n_phases = n_phases;
  auto kernel = projection_chain_kernel<NT, MAX_PHASES>;
  int device = 0, sms = 0, max_shared = 0;
  cudaFuncAttributes attributes;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (error == cudaSuccess) error = cudaFuncGetAttributes(&attributes, kernel);
  if (error != cudaSuccess) return error;
  // As many ring stages as fit beside the two partial tiles.
  const int partial_bytes = 2 * sizeof(float[CHAIN_CONSUMER_WARPS][NT][32][4]);
  int n_stages = (max_shared - (int)attributes.sharedSizeBytes - partial_bytes) / CHAIN_STAGE_BYTES;
  n_stages = n_stages > CHAIN_MAX_STAGES ? CHAIN_MAX_STAGES : n_stages;
  if (n_stages < 2) return cudaErrorInvalidValue;
  const int shared_bytes = n_stages * CHAIN_STAGE_BYTES + partial_bytes;
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
  if (error != cudaSuccess) return error;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(sms);  // one CTA a SM (its shared memory allows no second), all co-resident
  config.blockDim = dim3(CHAIN_THREADS);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeCooperative;  // the launch fails instead of hanging where they cannot be
  attribute[0].val.cooperative = 1;
  attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, program, rows, n_stages, state);
}

}  // namespace

extern "C" {

// Launches on `stream`; returns the launch's cudaError_t (0: launched). rows <= 16; k a multiple of 32;
// n_out a multiple of 16 * tiles (8 * tiles for SiLU·up); x, w, residual, norm_weight and out rows 16-byte
// aligned. norm_weight null: no norm; residual: only with EPILOGUE_RESIDUAL.
int dice_few_row_linear(const void* x, int64_t x_stride, const void* w, const void* residual,
                        int64_t residual_stride, const void* norm_weight, float eps, void* out, int64_t out_stride,
                        int rows, int k, int n_out, int epilogue, int tiles, int warps, int pdl, void* stream) {
  if (rows < 1 || rows > 16 || k % 32 != 0) return cudaErrorInvalidValue;
  const Arguments a{x,   x_stride,   w, residual, residual_stride, norm_weight, eps,
                    out, out_stride, rows, k,    n_out,           pdl != 0,    static_cast<cudaStream_t>(stream)};
  const bool norm = norm_weight != nullptr;
  switch (epilogue) {
    case EPILOGUE_NONE:
      return norm ? launch_shape<EPILOGUE_NONE, true>(tiles, warps, a)
                  : launch_shape<EPILOGUE_NONE, false>(tiles, warps, a);
    case EPILOGUE_RESIDUAL:
      return norm ? cudaErrorInvalidValue : launch_shape<EPILOGUE_RESIDUAL, false>(tiles, warps, a);
    case EPILOGUE_SILU_MUL:
      return norm ? launch_shape<EPILOGUE_SILU_MUL, true>(tiles, warps, a)
                  : launch_shape<EPILOGUE_SILU_MUL, false>(tiles, warps, a);
  }
  return cudaErrorInvalidValue;
}

// A chain of projections (ChainPhase, host memory) as one persistent kernel on `stream`: each phase reads what
// the one before wrote only after a grid barrier. state: dice_projection_chain_state_bytes() of zeroed device
// memory, kept for later launches of the same chain and used by no other chain while it runs. rows <= 16.
int dice_projection_chain(const void* phases, int n_phases, int rows, void* state, int pdl, void* stream) {
  if (rows < 1 || rows > 16 || n_phases < 1 || n_phases > CHAIN_MAX_PHASES) return cudaErrorInvalidValue;
  const auto* list = static_cast<const ChainPhase*>(phases);
  auto* chain_state = static_cast<ChainState*>(state);
  const auto s = static_cast<cudaStream_t>(stream);
  if (n_phases <= 4)
    return rows > 8 ? launch_chain<2, 4>(list, n_phases, rows, chain_state, pdl != 0, s)
                    : launch_chain<1, 4>(list, n_phases, rows, chain_state, pdl != 0, s);
  return rows > 8 ? launch_chain<2, CHAIN_MAX_PHASES>(list, n_phases, rows, chain_state, pdl != 0, s)
                  : launch_chain<1, CHAIN_MAX_PHASES>(list, n_phases, rows, chain_state, pdl != 0, s);
}

int dice_projection_chain_state_bytes() { return sizeof(ChainState); }

// Whether dice_projection_chain takes these phases at `rows` token rows (K a multiple of 512 and, at more than 8
// rows, at most 3072: x is held in registers; outputs a multiple of 16).
int dice_projection_chain_fits(const void* phases, int n_phases, int rows) {
  const auto* list = static_cast<const ChainPhase*>(phases);
  for (int p = 0; p < n_phases; ++p)
    if (!chain_phase_fits(list[p], rows)) return 0;
  return rows >= 1 && rows <= 16 && n_phases >= 1 && n_phases <= CHAIN_MAX_PHASES;
}

const char* dice_cuda_error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }
}
