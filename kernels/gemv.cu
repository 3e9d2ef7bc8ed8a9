// Dequantizing matrix-vector products for decode: y[b][r] = W[r] . x[b]
// for NB = 1..8 activation vectors at once (batched decode), every weight
// format of engine/quant.
//
// Layout: a block of 8 warps walks the columns in tiles of TE elements;
// each warp owns R rows. Per tile, every warp fetches its rows' tile bytes
// with coalesced 16-byte loads (the covering 16-byte-aligned range, so rows
// of any alignment work) into its shared slot, while the block stages the
// tile's slice of the NB activation vectors in shared memory once for all
// its rows (parts padded to 36 floats so float4 reads are conflict-free).
// The next tile's weight loads are issued before the current tile is
// computed. Each lane decodes 32-element parts four elements at a time and
// multiplies them with x; partial sums are reduced with warp shuffles.
#include "common.cuh"

#define GEMV_WARPS 8

// Tile width in elements: 2048 (1024 for 16-bit floats, 512 for f32),
// halved for more than two vectors so the staged x stays within 32 KiB.
template <int T> struct GemvTile { enum { E = 2048 }; };
template <> struct GemvTile<T_F32> { enum { E = 512 }; };
template <> struct GemvTile<T_F16> { enum { E = 1024 }; };
template <> struct GemvTile<T_BF16> { enum { E = 1024 }; };
template <int T, int NB> struct GemvTE { enum { E = NB <= 2 ? (int)GemvTile<T>::E : ((int)GemvTile<T>::E > 1024 ? 1024 : (int)GemvTile<T>::E) }; };

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
#if __CUDA_ARCH__ >= 800
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#else
  return __ldg(p);
#endif
}

template <int T, int NB, int R>
__device__ __forceinline__ void gemv_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                          const float* __restrict__ X, int xstride, float* __restrict__ Y,
                                          int ystride) {
  constexpr int BE = Tr<T>::BE, BB = Tr<T>::BB;
  constexpr int TE = GemvTE<T, NB>::E;
  constexpr int XP = TE / 32 * 36;           // staged x floats per vector
  constexpr int TB = TE / BE * BB;          // bytes of a full tile
  constexpr int SLOT = (TB + 32 + 15) & ~15; // shared bytes per row
  constexpr int NV = (TB + 15) / 16 + 1;     // most 16-byte vectors a tile spans
  constexpr int VL = (NV + 31) / 32;         // vectors per lane
  constexpr int DOFF = T == T_INT8 ? 4 : 0;  // INT8Row: scale before the data

  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* xs = reinterpret_cast<float*>(smem);
  uint8_t* sh = reinterpret_cast<uint8_t*>(smem) + NB * XP * 4 + warp * R * SLOT;

  // Work items are (row group, tile) pairs; a block takes row groups
  // blockIdx.x, +gridDim.x, ... and walks each one's tiles, so the next
  // item's weight loads are in flight while the current one is computed,
  // across row boundaries too.
  constexpr int GROUP = GEMV_WARPS * R;
  const int ntiles = (cols + TE - 1) / TE;
  const int ngroups = (rows + GROUP - 1) / GROUP;
  const int mygroups = (ngroups - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
  const int nitems = mygroups * ntiles;
  if (nitems <= 0) return;  // uniform across the block

  uint4 reg[R][VL];
  int nvec[R], shift[R];

  auto load = [&](int item) {
    const int g = (int)blockIdx.x + (item / ntiles) * (int)gridDim.x;
    const int tile = item % ntiles;
    const int te = min(TE, cols - tile * TE);
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int row = min(g * GROUP + warp * R + r, rows - 1);
      const uintptr_t start = (uintptr_t)(W + (long long)row * rowBytes + DOFF) + (uintptr_t)(tile * (TE / BE)) * BB;
      const uintptr_t end = start + (uintptr_t)(te / BE) * BB;
      const uintptr_t a0 = start & ~(uintptr_t)15;
      nvec[r] = (int)(((end + 15) & ~(uintptr_t)15) - a0) / 16;
      shift[r] = (int)(start - a0);
      const uint4* src = reinterpret_cast<const uint4*>(a0);
#pragma unroll
      for (int k = 0; k < VL; k++) {
        const int v = lane + 32 * k;
        if (v < nvec[r]) reg[r][k] = ld_stream(src + v);
      }
    }
  };

  float acc[R][NB];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) acc[r][b] = 0.0f;

  load(0);
  for (int item = 0; item < nitems; item++) {
    const int g = (int)blockIdx.x + (item / ntiles) * (int)gridDim.x;
    const int tile = item % ntiles;
    const int row0 = g * GROUP + warp * R;
    int sft[R];
    const int te = min(TE, cols - tile * TE);
    __syncthreads();  // the previous item's x and weights are consumed
    for (int i = threadIdx.x; i < NB * te / 4; i += 32 * GEMV_WARPS) {
      const int b = i / (te / 4), e = 4 * (i % (te / 4));
      const float4 v = __ldg(reinterpret_cast<const float4*>(X + (long long)b * xstride + tile * TE + e));
      *reinterpret_cast<float4*>(xs + b * XP + (e >> 5) * 36 + (e & 31)) = v;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
      uint4* dst = reinterpret_cast<uint4*>(sh + r * SLOT);
#pragma unroll
      for (int k = 0; k < VL; k++) {
        const int v = lane + 32 * k;
        if (v < nvec[r]) dst[v] = reg[r][k];
      }
      sft[r] = shift[r];
    }
    __syncthreads();
    if (item + 1 < nitems) load(item + 1);

    const int nparts = te / 32;
    for (int p = lane; p < nparts; p += 32) {
      const int blk = (32 * p) / BE, t = ((32 * p) % BE) / 32;
      Part<T> part[R];
#pragma unroll
      for (int r = 0; r < R; r++) part[r].load(sh + r * SLOT + sft[r] + blk * BB, t);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float w[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) part[r].get4(i, w[r]);
#pragma unroll
        for (int b = 0; b < NB; b++) {
          const float4 xv = *reinterpret_cast<const float4*>(xs + b * XP + p * 36 + 4 * i);
#pragma unroll
          for (int r = 0; r < R; r++) {
            float a = acc[r][b];
            a = fmaf(w[r][0], xv.x, a);
            a = fmaf(w[r][1], xv.y, a);
            a = fmaf(w[r][2], xv.z, a);
            a = fmaf(w[r][3], xv.w, a);
            acc[r][b] = a;
          }
        }
      }
    }

    if (tile == ntiles - 1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        float scale = 1.0f;
        if (T == T_INT8 && row0 + r < rows)
          scale = *reinterpret_cast<const float*>(W + (long long)(row0 + r) * rowBytes);
#pragma unroll
        for (int b = 0; b < NB; b++) {
          const float v = warp_sum(acc[r][b]);
          if (lane == 0 && row0 + r < rows) Y[(long long)b * ystride + row0 + r] = v * scale;
          acc[r][b] = 0.0f;
        }
      }
    }
  }
}

// Rows per warp: two when few vectors share the x loads, else one (keeps
// registers, and so occupancy, in check).
#define GEMV_R(NB) ((NB) <= 2 ? 2 : 1)

#define GEMV_NB(TY, NAME, NB)                                                                              \
  extern "C" __global__ void __launch_bounds__(256) gemv_##NAME##_##NB(                                    \
      const uint8_t* W, long long rowBytes, int rows, int cols, const float* X, int xstride, float* Y,     \
      int ystride) {                                                                                       \
    gemv_body<TY, NB, GEMV_R(NB)>(W, rowBytes, rows, cols, X, xstride, Y, ystride);                         \
  }
#define GEMV_TYPE(TY, NAME) \
  GEMV_NB(TY, NAME, 1) GEMV_NB(TY, NAME, 2) GEMV_NB(TY, NAME, 3) GEMV_NB(TY, NAME, 4) \
  GEMV_NB(TY, NAME, 5) GEMV_NB(TY, NAME, 6) GEMV_NB(TY, NAME, 7) GEMV_NB(TY, NAME, 8)
FOR_EACH_TYPE(GEMV_TYPE)
