// Dequantizing matrix-vector products for decode: y[b][r] = W[r] . x[b]
// for NB = 1..8 activation vectors at once (batched decode), every weight
// format of engine/quant.
//
// Three paths, chosen per type and batch at compile time (GemvPlan; the
// launcher mirrors it in matmul.go):
//   - staged (F16/BF16 direct units when NB*cols*4 bytes of x fit in
//     shared memory; see gemv_staged): x copied once per block into
//     swizzled shared memory, warps own whole row groups, grid sized to the
//     resident warps. For Q4_K/Q5_K it was slower than the direct path,
//     so K-quants keep that.
//   - direct (Q4_K, Q5_K, F16, BF16 for one or two vectors): a block of nw
//     warps (1..8, picked by the launcher so that the grid fills the
//     device) owns R consecutive rows; its warps split the row into
//     32-element units (warp w takes units w*32+lane, +32*nw, ...), each
//     lane computing its unit for all R rows, so every x value it fetches
//     (through the read-only cache) is used R times. A unit's fields are
//     16-byte aligned, so each lane loads them with 16-byte loads straight
//     into registers. No block-wide barrier except one at the end when
//     nw > 1 (cross-warp sum); lane partial sums are reduced with shuffles.
//     Misaligned weights fall back to word loads, one row per block.
//   - ring (Q4_K from three vectors, Q5_K at two): the same units, but each
//     warp copies its next window (32 units of each of its rows) into its
//     own shared-memory ring with cp.async while it computes the current
//     one; only __syncwarp between them.
//   - tiled (everything else): block-wide column tiles with x staged once
//     per block in shared memory (see gemv_tiled).
// Each lane decodes four elements at a time into floats (0.5 + q/256 built
// by byte permutation, one FMA with the sub-block's scale and offset) and
// multiplies them with x in float32.
#include "common.cuh"

// Where a unit's bytes come from: global memory, 16-byte aligned (one
// vector load per 16 bytes) or not (aligned words and funnel shifts), or a
// warp's shared-memory ring (aligned).
#define SRC_GA 0
#define SRC_GU 1
#define SRC_SH 2

// 16 weight bytes at p.
template <int M>
__device__ __forceinline__ uint4 ld16(const uint8_t* p) {
  if (M == SRC_GA) return ld_stream(p);
  if (M == SRC_SH) return *reinterpret_cast<const uint4*>(p);
  uint32_t w[4];
  ldwords<4>(p, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 16 header bytes: from global memory cached in L1, since the 8 lanes of a
// super-block read the same header.
template <int M>
__device__ __forceinline__ uint4 ldh16(const uint8_t* p) {
  if (M == SRC_GA) return __ldg(reinterpret_cast<const uint4*>(p));
  return ld16<M>(p);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// Unsigned byte k of x as an exact float.
__device__ __forceinline__ float u8f(uint32_t x, int k) {
  return __int_as_float(__byte_perm(x, 0x4B000000u, 0x7440 | k)) - 8388608.0f;
}

// ---- direct units: 32 elements of one row, fields 16-byte aligned ----
//
// A unit exposes load(row, u) (issue the loads), prep(u) (decode scales),
// get4(i, w) (elements 4i..4i+3 of the unit as floats) and col(u, i) (the
// column of element 4i).

// Q4_K unit u: super-block u>>3, 16-byte chunk c = u&7 of its 128 quant
// bytes: byte l of chunk c holds element 16(c&1)+l of sub-block 2(c>>1)
// (low nibble) and of sub-block 2(c>>1)+1 (high nibble).
template <int AL>
struct DQ4K {
  uint4 h, q;
  float A0, B0, A1, B1;
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 3) * 144;
    h = ldh16<AL>(b);
    q = ld16<AL>(b + 16 + 16 * (u & 7));
  }
  static __device__ __forceinline__ int col(int u, int i) {
    const int c = u & 7;
    return (u >> 3) * 256 + 64 * (c >> 1) + 16 * (c & 1) + (i < 4 ? 4 * i : 32 + 4 * (i - 4));
  }
  // Scales and mins of sub-blocks 2j, 2j+1 (k4_scale_words).
  __device__ __forceinline__ void prep(int u) {
    const int j = (u & 7) >> 1;
    uint32_t sw, mw;
    k4_scale_words(h, j, sw, mw);
    const int k = (2 * j) & 3;
    const float d = h2f(h.x & 0xFFFF), dmin = h2f(h.x >> 16);
    const float a0 = d * u8f(sw, k), a1 = d * u8f(sw, k + 1);
    A0 = 256.0f * a0;
    B0 = fmaf(-dmin, u8f(mw, k), -128.0f * a0);
    A1 = 256.0f * a1;
    B1 = fmaf(-dmin, u8f(mw, k + 1), -128.0f * a1);
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
    const uint32_t x = i < 4 ? word(q, i) & 0x0F0F0F0Fu : (word(q, i - 4) >> 4) & 0x0F0F0F0Fu;
    const float A = i < 4 ? A0 : A1, B = i < 4 ? B0 : B1;
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(x, k), A, B);
  }
};

// Q5_K unit: as Q4_K, plus the 16 high-bit bytes at 16+16(c&1) (bit t of
// byte l is the fifth bit of sub-block t's element l).
template <int AL>
struct DQ5K {
  uint4 h, qh, q;
  float A0, B0, A1, B1;
  int j;
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 3) * 176;
    const int c = u & 7;
    h = ldh16<AL>(b);
    qh = ld16<AL>(b + 16 + 16 * (c & 1));
    q = ld16<AL>(b + 48 + 16 * c);
  }
  static __device__ __forceinline__ int col(int u, int i) { return DQ4K<AL>::col(u, i); }
  __device__ __forceinline__ void prep(int u) {
    j = (u & 7) >> 1;
    uint32_t sw, mw;
    k4_scale_words(h, j, sw, mw);
    const int k = (2 * j) & 3;
    const float d = h2f(h.x & 0xFFFF), dmin = h2f(h.x >> 16);
    const float a0 = d * u8f(sw, k), a1 = d * u8f(sw, k + 1);
    A0 = 256.0f * a0;
    B0 = fmaf(-dmin, u8f(mw, k), -128.0f * a0);
    A1 = 256.0f * a1;
    B1 = fmaf(-dmin, u8f(mw, k + 1), -128.0f * a1);
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
    const int t = i < 4 ? 2 * j : 2 * j + 1;
    const uint32_t hb = ((word(qh, i & 3) >> t) & 0x01010101u) << 4;
    const uint32_t x = (i < 4 ? word(q, i) & 0x0F0F0F0Fu : (word(q, i - 4) >> 4) & 0x0F0F0F0Fu) | hb;
    const float A = i < 4 ? A0 : A1, B = i < 4 ? B0 : B1;
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(x, k), A, B);
  }
};

// F16 / BF16 unit: 32 consecutive elements, 64 bytes.
template <int AL, bool BF>
struct DH {
  uint4 v[4];
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)u * 64;
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = ld16<AL>(b + 16 * k);
  }
  static __device__ __forceinline__ int col(int u, int i) { return 32 * u + 4 * i; }
  __device__ __forceinline__ void prep(int) {}
  __device__ __forceinline__ void get4(int i, float* o) const {
    const uint32_t a = word(v[i >> 1], 2 * (i & 1)), c = word(v[i >> 1], 2 * (i & 1) + 1);
    if (BF) {
      o[0] = __int_as_float(a << 16);
      o[1] = __int_as_float(a & 0xFFFF0000u);
      o[2] = __int_as_float(c << 16);
      o[3] = __int_as_float(c & 0xFFFF0000u);
    } else {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&a));
      const float2 r = __half22float2(*reinterpret_cast<const __half2*>(&c));
      o[0] = p.x; o[1] = p.y; o[2] = r.x; o[3] = r.y;
    }
  }
};

// F32 unit: 32 consecutive elements, 128 bytes.
template <int AL>
struct DF {
  uint4 v[8];
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)u * 128;
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = ld16<AL>(b + 16 * k);
  }
  static __device__ __forceinline__ int col(int u, int i) { return 32 * u + 4 * i; }
  __device__ __forceinline__ void prep(int) {}
  __device__ __forceinline__ void get4(int i, float* o) const {
    o[0] = __uint_as_float(v[i].x);
    o[1] = __uint_as_float(v[i].y);
    o[2] = __uint_as_float(v[i].z);
    o[3] = __uint_as_float(v[i].w);
  }
};

template <int T, int AL> struct DUnit;
template <int AL> struct DUnit<T_Q4_K, AL> { typedef DQ4K<AL> U; };
template <int AL> struct DUnit<T_Q5_K, AL> { typedef DQ5K<AL> U; };
template <int AL> struct DUnit<T_F16, AL> { typedef DH<AL, false> U; };
template <int AL> struct DUnit<T_BF16, AL> { typedef DH<AL, true> U; };
template <int AL> struct DUnit<T_F32, AL> { typedef DF<AL> U; };

// Accumulate w (4 elements of R rows) times x (4 elements of NB vectors).
template <int R, int NB>
__device__ __forceinline__ void fma4(float (&acc)[R][NB], const float (&w)[4], int r, const float4 (&xv)[NB]) {
#pragma unroll
  for (int b = 0; b < NB; b++) {
    float a = acc[r][b];
    a = fmaf(w[0], xv[b].x, a);
    a = fmaf(w[1], xv[b].y, a);
    a = fmaf(w[2], xv[b].z, a);
    a = fmaf(w[3], xv[b].w, a);
    acc[r][b] = a;
  }
}

// Sums acc over the lanes and the block's warps and writes the R x NB
// results (times INT8Row's per-row scale).
template <int T, int R, int NB>
__device__ __forceinline__ void gemv_finish(float (&acc)[R][NB], const uint8_t* W, long long rowBytes, int rows,
                                            int row0, float* Y, int ystride) {
  __shared__ float red[8 * R * NB];
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) acc[r][b] = warp_sum(acc[r][b]);
  if (nw > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; r++)
#pragma unroll
        for (int b = 0; b < NB; b++) red[(warp * R + r) * NB + b] = acc[r][b];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < R * NB; i += blockDim.x) {
      float s = 0.0f;
      for (int w = 0; w < nw; w++) s += red[w * R * NB + i];
      const int r = i / NB, b = i % NB, row = row0 + r;
      if (row < rows) {
        if (T == T_INT8) s *= *reinterpret_cast<const float*>(W + (long long)row * rowBytes);
        Y[(long long)b * ystride + row] = s;
      }
    }
  } else if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int row = row0 + r;
      if (row < rows) {
        float scale = 1.0f;
        if (T == T_INT8) scale = *reinterpret_cast<const float*>(W + (long long)row * rowBytes);
#pragma unroll
        for (int b = 0; b < NB; b++) Y[(long long)b * ystride + row] = acc[r][b] * scale;
      }
    }
  }
}

template <int T, int NB, int R, int AL>
__device__ __forceinline__ void gemv_direct(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                            const float* __restrict__ X, int xstride, float* __restrict__ Y,
                                            int ystride) {
  typedef typename DUnit<T, AL>::U U;
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rowBytes;
  float acc[R][NB];
  zero_acc(acc);

  const int nunits = cols >> 5;
  for (int u = warp * 32 + lane; u < nunits; u += 32 * nw) {
    U un[R];
#pragma unroll
    for (int r = 0; r < R; r++) un[r].load(rp[r], u);
#pragma unroll
    for (int r = 0; r < R; r++) un[r].prep(u);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int c = U::col(u, i);
      float4 xv[NB];
#pragma unroll
      for (int b = 0; b < NB; b++) xv[b] = __ldg(reinterpret_cast<const float4*>(X + (long long)b * xstride + c));
#pragma unroll
      for (int r = 0; r < R; r++) {
        float w[4];
        un[r].get4(i, w);
        fma4<R, NB>(acc, w, r, xv);
      }
    }
  }
  gemv_finish<T, R, NB>(acc, W, rowBytes, rows, row0, Y, ystride);
}

// ---- direct units with x staged in shared memory ----
//
// Bytes of dynamic shared memory this launch was given; the launcher gives
// the direct path's kernels NB*cols*4 bytes exactly when it wants x staged
// (gemv_staged) and none otherwise.
__device__ __forceinline__ unsigned dyn_smem_bytes() {
  unsigned r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// Where float4 f of a staged x vector lives: an XOR swizzle within aligned
// groups of 4 (K-quants) or 8 (16-bit floats) float4s, so that the 8 lanes
// of each quarter-warp phase of a direct unit's x read hit 8 different
// 16-byte bank groups. K-quant units: lanes 0..7 of a phase read float4s
// 64s + 16(c>>1) + 4(c&1) + i' (c = lane&7, i' < 12): (f>>4)&3 = c>>1
// spreads the c>>1 groups. 16-bit floats: f = 8u + i, so (f>>3)&7 = lane&7.
template <int T>
__device__ __forceinline__ int xswz(int f) {
  if (T == T_Q4_K || T == T_Q5_K) return f ^ ((f >> 4) & 3);
  return f ^ ((f >> 3) & 7);
}

// Direct units, x from shared memory: the block copies the NB vectors into
// shared memory once (one barrier), then each warp owns whole row groups of
// R rows, taking groups blockIdx.x*nw+warp, +gridDim.x*nw, ... (the
// launcher sizes the grid so the groups divide evenly over resident
// warps), with no further barrier; a lane walks units lane, lane+32, ...
// of its rows. x reads cost 4 shared-memory wavefronts per instruction
// (conflict-free) instead of the 16 L1 lines a __ldg of the unit layout
// touches. Needs 16-byte aligned weights and NB*cols*4 bytes of dynamic
// shared memory.
template <int T, int NB, int R>
__device__ __forceinline__ void gemv_staged(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                            const float* __restrict__ X, int xstride, float* __restrict__ Y,
                                            int ystride) {
  typedef typename DUnit<T, SRC_GA>::U U;
  extern __shared__ uint4 smem[];
  float4* xs = reinterpret_cast<float4*>(smem);
  const int nf = cols >> 2;
  for (int i = threadIdx.x; i < NB * nf; i += blockDim.x) {
    const int b = i / nf, f = i - b * nf;
    xs[b * nf + xswz<T>(f)] = __ldg(reinterpret_cast<const float4*>(X + (long long)b * xstride) + f);
  }
  __syncthreads();
  const int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
  const int groups = (rows + R - 1) / R, nunits = cols >> 5;
  for (int g = blockIdx.x * nw + (threadIdx.x >> 5); g < groups; g += gridDim.x * nw) {
    const int row0 = g * R;
    const uint8_t* rp[R];
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rowBytes;
    float acc[R][NB];
    zero_acc(acc);
#pragma unroll 1
    for (int u = lane; u < nunits; u += 32) {
      U un[R];
#pragma unroll
      for (int r = 0; r < R; r++) un[r].load(rp[r], u);
#pragma unroll
      for (int r = 0; r < R; r++) un[r].prep(u);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int f = xswz<T>(U::col(u, i) >> 2);
        float4 xv[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) xv[b] = xs[b * nf + f];
#pragma unroll
        for (int r = 0; r < R; r++) {
          float w[4];
          un[r].get4(i, w);
          fma4<R, NB>(acc, w, r, xv);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int b = 0; b < NB; b++) {
        const float v = warp_sum(acc[r][b]);
        if (lane == 0 && row0 + r < rows) Y[(long long)b * ystride + row0 + r] = v;
      }
  }
}

// ---- shared-memory ring (cp.async) ----

__device__ __forceinline__ void cp16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
#endif
}
__device__ __forceinline__ void cp_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Bytes of 32 consecutive units of a row (a window); 16-byte multiples.
template <int T> struct WinBytes { enum { V = 32 * 32 / Tr<T>::BE * Tr<T>::BB }; };

// Direct units read from a per-warp ring in shared memory: each warp copies
// its next windows (32 units of each of its R rows) with cp.async, S-1
// windows ahead of the one it computes, so loads overlap the arithmetic
// without holding registers. Needs 16-byte aligned weights.
template <int T, int NB, int R, int S>
__device__ __forceinline__ void gemv_ring(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                          const float* __restrict__ X, int xstride, float* __restrict__ Y,
                                          int ystride) {
  typedef typename DUnit<T, SRC_SH>::U U;
  constexpr int WB = WinBytes<T>::V, UPB = Tr<T>::BE / 32;  // units per block
  extern __shared__ uint4 smem[];
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* ring = reinterpret_cast<uint8_t*>(smem) + warp * (S * R * WB);
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rowBytes;
  const int nunits = cols >> 5;
  const int nwin = (nunits + 31) >> 5;
  const int mywin = warp < nwin ? (nwin - warp + nw - 1) / nw : 0;

  auto issue = [&](int k) {
    if (k < mywin) {
      const int win = warp + k * nw;
      const int nv = min(32, nunits - 32 * win) / UPB * Tr<T>::BB / 16;
      uint8_t* st = ring + (k % S) * R * WB;
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint8_t* src = rp[r] + (long long)win * WB;
        for (int v = lane; v < nv; v += 32) cp16(st + r * WB + 16 * v, src + 16 * v);
      }
    }
    cp_commit();
  };

  float acc[R][NB];
  zero_acc(acc);

#pragma unroll
  for (int k = 0; k < S - 1; k++) issue(k);
  for (int k = 0; k < mywin; k++) {
    issue(k + S - 1);
    cp_wait<S - 1>();
    __syncwarp();
    const int u = 32 * (warp + k * nw) + lane;
    if (u < nunits) {
      const uint8_t* st = ring + (k % S) * R * WB;
      U un[R];
#pragma unroll
      for (int r = 0; r < R; r++) un[r].load(st + r * WB, lane);
#pragma unroll
      for (int r = 0; r < R; r++) un[r].prep(lane);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int c = U::col(u, i);
        float4 xv[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) xv[b] = __ldg(reinterpret_cast<const float4*>(X + (long long)b * xstride + c));
#pragma unroll
        for (int r = 0; r < R; r++) {
          float w[4];
          un[r].get4(i, w);
          fma4<R, NB>(acc, w, r, xv);
        }
      }
    }
    __syncwarp();
  }
  cp_wait<0>();
  gemv_finish<T, R, NB>(acc, W, rowBytes, rows, row0, Y, ystride);
}

// ---- tiled path ----
//
// A block of 8 warps walks the columns in tiles of TE elements; each warp
// owns R rows. Per tile, every warp fetches its rows' tile bytes with
// coalesced 16-byte loads (the covering 16-byte-aligned range, so rows of
// any alignment work) into its shared slot, while the block stages the
// tile's slice of the NB activation vectors in shared memory once for all
// its rows (parts padded to 36 floats so float4 reads are conflict-free).
// The next tile's weight loads are issued before the current tile is
// computed. Each lane decodes 32-element parts (common.cuh's Part) four
// elements at a time. Slower than the ring for one or two vectors of the
// aligned formats, but its x reads come from conflict-free shared memory,
// which wins for more vectors and for the formats whose blocks are not
// 16-byte aligned.
#define GEMV_WARPS 8

// Tile width in elements: 2048 (1024 for 16-bit floats, 512 for f32),
// halved for more than two vectors so the staged x stays within 32 KiB.
template <int T> struct GemvTile { enum { E = 2048 }; };
template <> struct GemvTile<T_F32> { enum { E = 512 }; };
template <> struct GemvTile<T_F16> { enum { E = 1024 }; };
template <> struct GemvTile<T_BF16> { enum { E = 1024 }; };
template <int T, int NB> struct GemvTE { enum { E = NB <= 2 ? (int)GemvTile<T>::E : ((int)GemvTile<T>::E > 1024 ? 1024 : (int)GemvTile<T>::E) }; };

template <int T, int NB, int R>
__device__ __forceinline__ void gemv_tiled(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
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
  zero_acc(acc);

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


// ---- per-type plan (mirrored by matmul.go's gemvPlanFor) ----
#define PLAN_TILED 0
#define PLAN_DIRECT 1
#define PLAN_RING 2
// Direct loads are fastest for one or two vectors of the aligned formats,
// the ring for Q4_K from three vectors and Q5_K at two, the tiled path
// elsewhere.
template <int T, int NB> struct GemvPlan {
  enum {
    K = (T == T_Q4_K && NB <= 2) || (T == T_Q5_K && NB == 1) || ((T == T_F16 || T == T_BF16) && NB <= 2)
            ? PLAN_DIRECT
        : (T == T_Q4_K || (T == T_Q5_K && NB == 2)) ? PLAN_RING
                                                     : PLAN_TILED,
    R = K == PLAN_TILED ? (NB <= 2 ? 2 : 1) : ((T == T_F16 || T == T_BF16) && NB == 2 ? 2 : 4),
    S = 2,
  };
};

template <int T, int NB, int K, int R, int S>
__device__ __forceinline__ void gemv_any(const uint8_t* W, long long rowBytes, int rows, int cols, const float* X,
                                         int xstride, float* Y, int ystride) {
  if constexpr (K == PLAN_TILED) {
    gemv_tiled<T, NB, R>(W, rowBytes, rows, cols, X, xstride, Y, ystride);
  } else {
    // Misaligned weights (never from strata's allocator): one row per
    // block, word loads; the launcher sizes the grid the same way.
    if ((((uintptr_t)W | (uintptr_t)rowBytes) & 15) != 0) {
      gemv_direct<T, NB, 1, SRC_GU>(W, rowBytes, rows, cols, X, xstride, Y, ystride);
    } else if (K == PLAN_RING) {
      gemv_ring<T, NB, R, S>(W, rowBytes, rows, cols, X, xstride, Y, ystride);
    } else if ((T == T_F16 || T == T_BF16) && dyn_smem_bytes() != 0) {
      gemv_staged<T, NB, R>(W, rowBytes, rows, cols, X, xstride, Y, ystride);
    } else {
      gemv_direct<T, NB, R, SRC_GA>(W, rowBytes, rows, cols, X, xstride, Y, ystride);
    }
  }
}

#define GEMV_NB(TY, NAME, NB)                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_##NAME##_##NB(                                \
      const uint8_t* W, long long rowBytes, int rows, int cols, const float* X, int xstride, float* Y, \
      int ystride) {                                                                                   \
    PDL_ENTRY();                                                                                       \
    gemv_any<TY, NB, GemvPlan<TY, NB>::K, GemvPlan<TY, NB>::R, GemvPlan<TY, NB>::S>(                    \
        W, rowBytes, rows, cols, X, xstride, Y, ystride);                                              \
  }
#define GEMV_TYPE(TY, NAME) \
  GEMV_NB(TY, NAME, 1) GEMV_NB(TY, NAME, 2) GEMV_NB(TY, NAME, 3) GEMV_NB(TY, NAME, 4) \
  GEMV_NB(TY, NAME, 5) GEMV_NB(TY, NAME, 6) GEMV_NB(TY, NAME, 7) GEMV_NB(TY, NAME, 8)
FOR_EACH_TYPE(GEMV_TYPE)

// ---- fused decode launches: several matrices in one grid ----
//
// gemv_fused covers up to three matrices sharing x (q, k, v) in one grid,
// or, in GLU mode, gate and up with the gated activation in the epilogue
// (out = act(gate.x) * (up.x), never storing gate.x or up.x). Each block
// owns a group of rows of one matrix (GLU: FR/2 rows of gate and the same
// rows of up) and, like the direct path, its warps split the row into
// units; the matrices may have different types (the block dispatches on
// its matrix's type). Q6_K, whose 210-byte blocks are not 16-byte
// aligned, uses 64-element units read with word loads (DQ6K); a
// single-matrix launch of it is the Q6_K direct path.

// Q6_K unit: 64 elements of one super-block's half n = (u>>1)&1 — columns
// 128n + 32qq + 16h + j for quarters qq = 0..3 and j < 16, h = u&1 — from
// 16 bytes of each of the half's two low-bit regions (quarters 0/2 and 1/3
// as low/high nibbles) and 16 bytes of its high-bit region (2 bits per
// quarter): 48 bytes, every bit used. Groups i = 4qq + jj (4 elements).
struct DQ6K {
  uint32_t a[4], c[4], hb[4];
  uint32_t sc;  // the unit's 4 int8 scales, quarter qq in byte qq
  float d;
  enum { E = 64 };
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 2) * 210;
    const int n = (u >> 1) & 1, h = u & 1;
    ldwords<4>(b + 64 * n + 16 * h, a);
    ldwords<4>(b + 64 * n + 32 + 16 * h, c);
    ldwords<4>(b + 128 + 32 * n + 16 * h, hb);
    uint32_t sw[2];
    ldwords<2>(b + 192 + 8 * n, sw);
    sc = __byte_perm(sw[0], sw[1], h ? 0x7531 : 0x6420);  // scale bytes 2qq+h
    d = h2f(ldu16(b + 208));
  }
  static __device__ __forceinline__ int col(int u, int i) {
    return (u >> 2) * 256 + 128 * ((u >> 1) & 1) + 32 * (i >> 2) + 16 * (u & 1) + 4 * (i & 3);
  }
  __device__ __forceinline__ void prep(int) {}
  __device__ __forceinline__ void get4(int i, float* o) const {
    const int qq = i >> 2, jj = i & 3;
    const uint32_t w = (qq & 1) ? c[jj] : a[jj];
    const uint32_t x = ((w >> (4 * (qq >> 1))) & 0x0F0F0F0Fu) | (((hb[jj] >> (2 * qq)) & 0x03030303u) << 4);
    const float s = d * (float)(int8_t)((sc >> (8 * qq)) & 0xff);  // engine/quant: d * scale
    const float A = 256.0f * s, B = -160.0f * s;
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(x, k), A, B);
  }
};

// DQ6K's unit of a re-laid Q6_K row (T_Q6_KA, common.cuh): the same
// words from three aligned 16-byte loads and two misc halves.
struct DQ6KA : DQ6K {
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 2) * 210;
    const int p = q6ka_pad(b), k = u & 3;
    const uint4* q = reinterpret_cast<const uint4*>(b + p + 48 * k);
    const uint4 A = q[0], C = q[1], H = q[2];
    a[0] = A.x; a[1] = A.y; a[2] = A.z; a[3] = A.w;
    c[0] = C.x; c[1] = C.y; c[2] = C.z; c[3] = C.w;
    hb[0] = H.x; hb[1] = H.y; hb[2] = H.z; hb[3] = H.w;
    sc = q6ka_scales(b, p, k);
    d = q6ka_d(b, p);
  }
};

// Units of 32 elements (the direct path's) or 64 (DQ6K, DQ6KA): elements
// per unit and 4-element groups per unit.
template <typename U> struct UnitE { enum { E = 32 }; };
template <> struct UnitE<DQ6K> { enum { E = 64 }; };
template <> struct UnitE<DQ6KA> { enum { E = 64 }; };

template <int T> struct FUnit { typedef typename DUnit<T, SRC_GA>::U U; };
template <> struct FUnit<T_Q6_K> { typedef DQ6K U; };
template <> struct FUnit<T_Q6_KA> { typedef DQ6KA U; };

// Partial dot products of this lane for R rows (row pointers rp) against NB
// vectors: units warp*32+lane, +32*nw, ...
template <int T, int NB, int R>
__device__ __forceinline__ void fused_rows(const uint8_t* const (&rp)[R], int cols, const float* __restrict__ X,
                                           float (&acc)[R][NB]) {
  typedef typename FUnit<T>::U U;
  constexpr int E = UnitE<U>::E, NI = E / 4;
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nunits = cols / E;
  for (int u = warp * 32 + lane; u < nunits; u += 32 * nw) {
    U un[R];
#pragma unroll
    for (int r = 0; r < R; r++) un[r].load(rp[r], u);
#pragma unroll
    for (int r = 0; r < R; r++) un[r].prep(u);
#pragma unroll
    for (int i = 0; i < NI; i++) {
      const int c = U::col(u, i);
      float4 xv[NB];
#pragma unroll
      for (int b = 0; b < NB; b++) xv[b] = __ldg(reinterpret_cast<const float4*>(X + (long long)b * cols + c));
#pragma unroll
      for (int r = 0; r < R; r++) {
        float w[4];
        un[r].get4(i, w);
        fma4<R, NB>(acc, w, r, xv);
      }
    }
  }
}

// Rows per block of a matrix of type t in gemv_fused: 4, but 2 for Q6_K,
// whose word-loaded units need twice the registers (matmul.go's
// fusedRowsFor).
__host__ __device__ __forceinline__ int fused_rg(int t) { return t == T_Q6_K || t == T_Q6_KA ? 2 : 4; }

#define FUSED_R 4

// fused_rows over rows 0 and 1 of a block's group (the Q6_K types' 2-row
// groups, fused_rg).
template <int T, int NB>
__device__ __forceinline__ void fused_rows2(const uint8_t* const (&rp)[FUSED_R], int cols, const float* X,
                                            float (&acc)[FUSED_R][NB]) {
  const uint8_t* rp2[2] = {rp[0], rp[1]};
  float a2[2][NB];
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) a2[r][b] = 0.0f;
  fused_rows<T, NB, 2>(rp2, cols, X, a2);
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) acc[r][b] = a2[r][b];
}

// Matrix types gemv_fused handles (fused.go's fusedTypes). The Q6_K types
// compute only rows 0 and 1 of acc.
template <int NB>
__device__ __forceinline__ void fused_dispatch(int t, const uint8_t* const (&rp)[FUSED_R], int cols,
                                               const float* X, float (&acc)[FUSED_R][NB]) {
  switch (t) {
    case T_Q4_K: fused_rows<T_Q4_K, NB, FUSED_R>(rp, cols, X, acc); break;
    case T_F16: fused_rows<T_F16, NB, FUSED_R>(rp, cols, X, acc); break;
    case T_BF16: fused_rows<T_BF16, NB, FUSED_R>(rp, cols, X, acc); break;
    case T_Q6_K: fused_rows2<T_Q6_K, NB>(rp, cols, X, acc); break;
    case T_Q6_KA: fused_rows2<T_Q6_KA, NB>(rp, cols, X, acc); break;
  }
}

// Segment s: weights W_s (rows_s rows of rowBytes_s, type t_s), output
// Y_s (NB rows of rows_s floats). Plain mode: blocks take groups of
// fused_rg(t_s) rows of segment 0, then 1, then 2 (rows_s = 0 leaves a
// segment out). GLU mode: segments 0 (gate) and 1 (up) have the same shape
// and type; a block takes fused_rg/2 rows of each and writes act(gate)*up
// to Y0.
template <int NB>
__device__ __forceinline__ void gemv_fused_body(const uint8_t* W0, long long rb0, float* Y0, int rows0, int t0,
                                                const uint8_t* W1, long long rb1, float* Y1, int rows1, int t1,
                                                const uint8_t* W2, long long rb2, float* Y2, int rows2, int t2,
                                                int cols, const float* X, int mode) {
  constexpr int R = FUSED_R;
  __shared__ float red[8 * R * NB];
  const int nw = blockDim.x >> 5;
  float acc[R][NB];
  zero_acc(acc);
  const uint8_t* rp[R];
  int row0, rows, t, rg;
  float* Y;
  if (mode != GLU_PLAIN) {
    t = t0;
    rg = fused_rg(t);
    const int H = rg / 2;
    row0 = blockIdx.x * H;
    rows = rows0;
    Y = Y0;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int rr = min(row0 + (r % H), rows - 1);
      rp[r] = r < H ? W0 + (long long)rr * rb0 : W1 + (long long)rr * rb1;
    }
  } else {
    const int rg0 = fused_rg(t0), rg1 = fused_rg(t1);
    const int g0 = (rows0 + rg0 - 1) / rg0, g1 = (rows1 + rg1 - 1) / rg1;
    int g = blockIdx.x;
    const uint8_t* W;
    long long rb;
    if (g < g0) {
      W = W0, rb = rb0, rows = rows0, t = t0, Y = Y0;
    } else if (g < g0 + g1) {
      g -= g0;
      W = W1, rb = rb1, rows = rows1, t = t1, Y = Y1;
    } else {
      g -= g0 + g1;
      W = W2, rb = rb2, rows = rows2, t = t2, Y = Y2;
    }
    rg = fused_rg(t);
    row0 = g * rg;
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  }
  fused_dispatch<NB>(t, rp, cols, X, acc);
  gemv_rows_store<R, NB>(acc, red, nw, rg, mode, row0, rows, Y);
}

#define GEMV_FUSED(NB)                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_fused_##NB(                                            \
      const uint8_t* W0, long long rb0, float* Y0, int rows0, int t0, const uint8_t* W1, long long rb1,        \
      float* Y1, int rows1, int t1, const uint8_t* W2, long long rb2, float* Y2, int rows2, int t2, int cols,  \
      const float* X, int mode) {                                                                               \
    PDL_ENTRY();                                                                                                \
    gemv_fused_body<NB>(W0, rb0, Y0, rows0, t0, W1, rb1, Y1, rows1, t1, W2, rb2, Y2, rows2, t2, cols, X, mode); \
  }
GEMV_FUSED(1)
GEMV_FUSED(2)
