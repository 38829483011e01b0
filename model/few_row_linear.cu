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
    __shared__ float warp_squares[WARPS][NT * 8];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      float s = sum_squares[j];  // the quad's four threads hold the same token's other k
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (t == 0) warp_squares[warp][j * 8 + g] = s;
    }
    __syncthreads();
    if (threadIdx.x < NT * 8) {
      float s = 0.f;
#pragma unroll
      for (int v = 0; v < WARPS; ++v) s += warp_squares[v][threadIdx.x];
      token_scale[threadIdx.x] = rsqrtf(s / k + eps);
    }
  }
  __syncthreads();

  // Accumulator element e of lane (g, t): fragment row g (+8 for e >= 2), token column 2t + (e & 1).
  constexpr int PAIRS = EPILOGUE == EPILOGUE_SILU_MUL ? 2 : 4;  // SiLU·up: a thread takes e and e + 2 together
  for (int index = threadIdx.x; index < TILES * NT * 32 * PAIRS; index += WARPS * 32) {
    const int e = index % PAIRS, src_lane = index / PAIRS % 32, j = index / PAIRS / 32 % NT;
    const int i = index / PAIRS / 32 / NT;
    const int token = j * 8 + 2 * (src_lane & 3) + (e & 1);
    if (token >= rows) continue;
    const int r = (src_lane >> 2) + (e >= 2 ? 8 : 0);
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
      // As the unfused model: gate and up rounded to bf16, SiLU·up in fp32, rounded once.
      const float gate = round_bf16(y);
      const int feature = (first_tile + i) * 8 + r;
      out[token * out_stride + feature] = __float2bfloat16(gate / (1.f + __expf(-gate)) * round_bf16(up));
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

const char* dice_cuda_error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }
}
