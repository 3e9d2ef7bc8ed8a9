// Integer decode GEMV for Q4_K weights (kernels.Tuning.IntegerGEMV): x is first
// quantized to 16-bit integers in blocks of 64 (gemvq_x), split into a
// signed high byte and an unsigned low byte per element, so that each lane
// multiplies 4 weight nibbles by 4 x bytes in one dp4a instruction; the
// dot products of a 16-element half sub-block are exact 32-bit integers,
// scaled by the sub-block's 6-bit scale and minimum in integers too, and
// converted to float once per 32 weights.
//
// Why: the float32 direct path (gemv.cu) spends ~4.8 SASS instructions per
// weight (616 per 128 in its inner loop: 2 FFMA, 1.1 PRMT, 0.7 logic per
// weight), close to what a multiprocessor can issue while streaming
// weights at the copy bandwidth. This path needs ~1.8 (12 logic ops to
// unpack 32 nibbles, 16 dp4a per vector, ~25 for scales and the float
// update, loads shared by the rows of a block).
//
// Fidelity: x is rounded to 16 bits of its 64-block's maximum (error <=
// max|x|/65534 per element; NMSE ~5e-10 for Gaussian blocks, far below the
// f16 x of the prefill GEMM); the weights stay exact integers; every sum
// after the integer dot products is float32 as in gemv.cu.
//
// Quantized x: common.cuh's layout (gemvq_bytes, gemvq_put4); a Q4_K
// unit with half h reads its 16-element group sums h and 2+h as one 8-byte
// load, hence their order 0, 2, 1, 3.
#include "common.cuh"

// dp4a with the operand signedness of its PTX type suffixes (a, b). A host
// build of this file (GEMVQ_HOST_CHECK: a C++ check of the unit
// arithmetic against the Go emulation, kernels' TestHostBuild*)
// computes them in C.
#ifdef GEMVQ_HOST_CHECK
template <bool SA, bool SB>
static int dp4a_c(uint32_t a, uint32_t b, int c) {
  uint32_t s = (uint32_t)c;
  for (int i = 0; i < 4; i++) {
    const int x = SA ? (int)(int8_t)(a >> (8 * i)) : (int)(uint8_t)(a >> (8 * i));
    const int y = SB ? (int)(int8_t)(b >> (8 * i)) : (int)(uint8_t)(b >> (8 * i));
    s += (uint32_t)(x * y);
  }
  return (int)s;
}
__device__ __forceinline__ int dp4a_ss(uint32_t a, uint32_t b, int c) { return dp4a_c<true, true>(a, b, c); }
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) { return dp4a_c<false, true>(a, b, c); }
__device__ __forceinline__ int dp4a_uu(uint32_t a, uint32_t b, int c) { return dp4a_c<false, false>(a, b, c); }
#else
__device__ __forceinline__ int dp4a_ss(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ int dp4a_uu(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
#endif

__device__ __forceinline__ uint32_t qword(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}


// One 64-block of x quantized by a warp: lane holds elements 2*lane and
// 2*lane+1 (v); returns their x_int (q0, q1), the block's scale sx (NaN if
// the block holds a NaN) and, at lanes 8g, group g's sum of x_int.
__device__ __forceinline__ void quant64(float2 v, int& q0, int& q1, float& sx, int& s) {
  const float mx = warp_max(fmaxf(fabsf(v.x), fabsf(v.y)));
  const bool nan = __any_sync(0xffffffffu, v.x != v.x || v.y != v.y);
  q0 = 0;
  q1 = 0;
  sx = 0.0f;
  if (mx > 0.0f) {
    const float inv = (float)GEMVQ_MAX / mx;
    q0 = min(max(__float2int_rn(v.x * inv), -GEMVQ_MAX), GEMVQ_MAX);
    q1 = min(max(__float2int_rn(v.y * inv), -GEMVQ_MAX), GEMVQ_MAX);
    sx = mx / (float)GEMVQ_MAX;
  }
  if (nan) sx = __int_as_float(0x7fc00000);
  s = q0 + q1;
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 4);
}

// Writes a quantized 64-block (quant64's results) at base, a vector's
// quantized x (gemvq_bytes(cols) bytes).
__device__ __forceinline__ void put64(uint8_t* base, int cols, int blk, int lane, int q0, int q1, float sx, int s) {
  const uint32_t h = ((uint32_t)(q0 >> 8) & 0xffu) | (((uint32_t)(q1 >> 8) & 0xffu) << 8);
  const uint32_t l = ((uint32_t)q0 & 0xffu) | (((uint32_t)q1 & 0xffu) << 8);
  const int c = 64 * blk + 2 * lane;  // the lane's two bytes share a chunk
  const int off = c;
  *reinterpret_cast<uint16_t*>(base + off) = (uint16_t)h;
  *reinterpret_cast<uint16_t*>(base + cols + off) = (uint16_t)l;
  gemvq_put6<2>(base, cols, c, h, l);
  gemvq_putp<2>(base, cols, c, h, l);
  const int s2 = s + __shfl_xor_sync(0xffffffffu, s, 8);  // lane 0: groups 0+1, lane 16: 2+3
  int* hdr = reinterpret_cast<int*>(base + 2LL * cols + 32 * blk);
  if (lane < 4) hdr[lane] = lane == 0 ? __float_as_int(sx) : 0;
  if (lane == 0) {
    gemvq_put6_scale(base, cols, blk, sx);
    gemvq_putp_scale(base, cols, blk, sx);
  }
  if ((lane & 15) == 0) gemvq_putp_sum(base, cols, blk, lane >> 4, s2);
  if ((lane & 7) == 0) {
    const int g = lane >> 3;
    hdr[4 + (((g & 1) << 1) | (g >> 1))] = s;
    gemvq_put6_sum(base, cols, blk, g, s);
  }
}

// gemvq_x quantizes nb vectors of cols floats (cols % 64 == 0, x 8-byte
// aligned) into XQ, one warp per 64-block. A block with a NaN gets sx =
// NaN, so the products stay NaN as in the float path.
extern "C" __global__ void __launch_bounds__(256) gemvq_x(const float* __restrict__ X, int cols, int nb,
                                                         uint8_t* __restrict__ XQ) {
  PDL_ENTRY();
  const int gw = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int nblk = cols >> 6;
  if (gw >= nb * nblk) return;  // uniform per warp
  const int b = gw / nblk, blk = gw - b * nblk;
  const float2 v = *reinterpret_cast<const float2*>(X + (long long)b * cols + 64 * blk + 2 * lane);
  int q0, q1, s;
  float sx;
  quant64(v, q0, q1, sx, s);
  put64(XQ + (long long)b * gemvq_bytes(cols), cols, blk, lane, q0, q1, sx, s);
}

// The x side of Q4_K unit u for one vector: the high and low bytes of the
// 16 elements under the unit's low nibbles (xh0, xl0) and high nibbles
// (xh1, xl1), the 64-block's scale and the two group sums.
struct QXU {
  uint4 xh0, xh1, xl0, xl1;
  float sx;
  int s0, s1;
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int sb = u >> 3, c = u & 7, j = c >> 1, half = c & 1;
    const int a0 = 256 * sb + 64 * j + 16 * half;
    xh0 = __ldg(reinterpret_cast<const uint4*>(base + a0));
    xh1 = __ldg(reinterpret_cast<const uint4*>(base + a0 + 32));
    xl0 = __ldg(reinterpret_cast<const uint4*>(base + cols + a0));
    xl1 = __ldg(reinterpret_cast<const uint4*>(base + cols + a0 + 32));
    const uint8_t* hdr = base + 2LL * cols + 32 * (4 * sb + j);
    sx = __ldg(reinterpret_cast<const float*>(hdr));
    const int2 s = __ldg(reinterpret_cast<const int2*>(hdr + 16 + 8 * half));
    s0 = s.x;
    s1 = s.y;
  }
};

// Q4_K unit u of one row (gemv.cu's DQ4K layout: 16 quant bytes of chunk
// c = u&7 of super-block u>>3 plus the super-block's 16-byte header): the
// integer scales and mins of its two sub-blocks.
struct QW4 {
  uint4 h, q;
  __device__ __forceinline__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 3) * 144;
    h = __ldg(reinterpret_cast<const uint4*>(b));
    q = ld_stream(b + 16 + 16 * (u & 7));
  }
  // acc += this unit's dot product with x (one vector).
  __device__ __forceinline__ void dot(int u, const QXU& x, float& acc) const {
    const int j = (u & 7) >> 1;
    uint32_t sw, mw;
    k4_scale_words(h, j, sw, mw);
    // Bytes k, k+1 of the words (k = 0 or 2) by byte permutation.
    const int k = (2 * j) & 3;
    const int sc0 = (int)__byte_perm(sw, 0, 0x4440 | k), sc1 = (int)__byte_perm(sw, 0, 0x4441 + k);
    const int m0 = (int)__byte_perm(mw, 0, 0x4440 | k), m1 = (int)__byte_perm(mw, 0, 0x4441 + k);
    // High nibbles stay in place (16x their value; a u32 x s32 dp4a keeps
    // them positive), the sum is divided by 16 exactly at the end.
    int h0 = 0, h1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t w = qword(q, i);
      h0 = dp4a_ss(w & 0x0F0F0F0Fu, qword(x.xh0, i), h0);
      h1 = dp4a_us(w & 0xF0F0F0F0u, qword(x.xh1, i), h1);
    }
    int i0 = (int)((uint32_t)h0 << 8), i1 = (int)((uint32_t)h1 << 8);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t w = qword(q, i);
      i0 = dp4a_uu(w & 0x0F0F0F0Fu, qword(x.xl0, i), i0);
      i1 = dp4a_uu(w & 0xF0F0F0F0u, qword(x.xl1, i), i1);
    }
    const int t = sc0 * i0 + sc1 * (i1 >> 4);
    const int m = m0 * x.s0 + m1 * x.s1;
    const float d = h2f(h.x & 0xFFFF), dmin = h2f(h.x >> 16);
    const float f = fmaf(-dmin, (float)m, d * (float)t);
    acc = fmaf(x.sx, f, acc);
  }
};

#define GEMVQ_R 4

// gemvq_fused: gemv.cu's gemv_fused for Q4_K matrices on quantized x: up
// to three matrices (plain mode; blocks take 4 rows of segment 0, then 1,
// then 2) or gate and up (GLU modes; a block takes 2 rows of each and
// writes act(gate)*up to Y0). Warps split a row's units (warp w takes
// units w*32+lane, +32*nw, ...); weights 16-byte aligned.
// Row group g: plain mode, group g of segments 0, 1, 2 in turn (R rows
// each); GLU modes, rows g*R/2.. of gate (rp[0..R/2)) and of up
// (rp[R/2..R)). Rows past the end repeat the last (never stored).
// gemvq_segment: plain mode's row group g of R rows: group g of segments
// 0, 1, 2 in turn (ceil(rows_i / R) groups each).
template <int R>
__device__ __forceinline__ void gemvq_segment(int g, const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                              const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                              const uint8_t* W2, long long rb2, float* Y2, int rows2,
                                              const uint8_t* (&rp)[R], int& row0, int& rows, float*& Y) {
  const int g0 = (rows0 + R - 1) / R, g1 = (rows1 + R - 1) / R;
  const uint8_t* W;
  long long rb;
  if (g < g0) {
    W = W0, rb = rb0, rows = rows0, Y = Y0;
  } else if (g < g0 + g1) {
    g -= g0;
    W = W1, rb = rb1, rows = rows1, Y = Y1;
  } else {
    g -= g0 + g1;
    W = W2, rb = rb2, rows = rows2, Y = Y2;
  }
  row0 = g * R;
  row_ptrs<R>(W, rb, row0, rows, rp);
}

__device__ __forceinline__ void gemvq_group(int g, const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                            const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                            const uint8_t* W2, long long rb2, float* Y2, int rows2, int mode,
                                            const uint8_t* (&rp)[GEMVQ_R], int& row0, int& rows, float*& Y) {
  constexpr int R = GEMVQ_R;
  if (mode != GLU_PLAIN) {
    row0 = g * (R / 2);
    rows = rows0;
    Y = Y0;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int rr = min(row0 + (r % (R / 2)), rows - 1);
      rp[r] = r < R / 2 ? W0 + (long long)rr * rb0 : W1 + (long long)rr * rb1;
    }
    return;
  }
  gemvq_segment<R>(g, W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, rp, row0, rows, Y);
}

// gemvq_walk: a lane's dot products for R rows (row pointers rp) of
// nunits units each against NB quantized vectors, with UN units per lane
// in flight: lane l of warp w takes units 32w + l, +step, ... (step = 32
// warps: the order of gemvq_body's UN = 1 walk), all its first UN units'
// weights loaded before pdl_wait (weights are no kernel's output), each
// unit's slot refilled with the unit UN steps on after its dot products.
// W is a unit of weights (load(row, u), dot(u, x, acc)), X one vector's
// side of it (load(base, cols, u)).
template <typename W, typename X, int NB, int R, int UN>
__device__ __forceinline__ void gemvq_walk(const uint8_t* const (&rp)[R], int nunits, int cols, const uint8_t* XQ,
                                           float (&acc)[R][NB]) {
  const int step = 32 * (blockDim.x >> 5);
  const long long qb = gemvq_bytes(cols);
  int u = (threadIdx.x >> 5) * 32 + (threadIdx.x & 31);
  W w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], u + j * step);
  pdl_trigger();
  pdl_wait();
  for (; u < nunits; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < nunits) {
        X x[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) x[b].load(XQ + b * qb, cols, uj);
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
          for (int b = 0; b < NB; b++) w[j][r].dot(uj, x[b], acc[r][b]);
        if (uj + UN * step < nunits)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], uj + UN * step);
      }
    }
  }
}

template <int NB, int UN>
__device__ __forceinline__ void gemvq_body(const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                           const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                           const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                                           const uint8_t* XQ, int mode, int bid) {
  constexpr int R = GEMVQ_R;
  __shared__ float red[8 * R * NB];
  const int nw = blockDim.x >> 5;
  const uint8_t* rp[R];
  int row0, rows;
  float* Y;
  gemvq_group(bid, W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, mode, rp, row0, rows, Y);
  float acc[R][NB];
  zero_acc(acc);
  const int nunits = cols >> 5;
  // gemvq_walk: the lane's first UN units of weights are in flight before
  // pdl_wait (the weights are no kernel's output), so they overlap the
  // previous kernel's tail; each next unit is loaded after the current
  // one's dot products (where a lane has at most UN units, a 4096-column
  // row over 2 warps with UN = 2, every weight of the block is in flight
  // before the wait).
  gemvq_walk<QW4, QXU, NB, R, UN>(rp, nunits, cols, XQ, acc);
  gemv_rows_store<R, NB>(acc, red, nw, R, mode, row0, rows, Y);
}

#define GEMVQ_FUSED(NAME, NB, UN)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) NAME(                                                     \
      const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1, long long rb1, float* Y1,    \
      int rows1, const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols, const uint8_t* XQ,         \
      int mode) {                                                                                             \
    gemvq_body<NB, UN>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ, mode, blockIdx.x); \
  }
GEMVQ_FUSED(gemvq_fused_1, 1, 1)
GEMVQ_FUSED(gemvq_fused_2, 2, 1)
// Two units per lane in flight, both loaded before pdl_wait (gemvq4Launch
// takes it for launches that fit the device at once, where every block
// then has its weights in flight before the wait).
GEMVQ_FUSED(gemvq_fused_u2_1, 1, 2)

// ---- Q4_K pair units (gemvq_p*) ----
//
// A pair unit v is the 64 elements of sub-blocks 2j and 2j+1 of
// super-block v >> 2 (j = v & 3): the 32 quant bytes of chunk j, both of
// whose 16-byte halves share one scale and min per sub-block, d, dmin and
// one x 64-block. The integer dot products of both halves are summed
// before the scales (t = sc0*i0 + sc1*(i1>>4) stays below 2^31: 32
// elements of |x_int| <= 32767, nibbles <= 15, scales <= 63), so the
// scale decoding and the float update come once per 64 weights instead of
// once per 32, and a lane holds 12 registers of weights per 32 quant
// bytes instead of 16. x comes from LP (common.cuh), where a warp's x
// loads read 512 contiguous bytes. It was faster than gemvq_fused_u2_1
// for the one-wave launches of o and down's Q4_K half and no faster
// elsewhere, so gemvqPairGeometry takes it for those.

// gemvq_ld_pieces loads unit u's high-byte pieces 0..3 and low-byte pieces
// 4..7 from a piece layout of n units at at (common.cuh's L6 and LP).
__device__ __forceinline__ void gemvq_ld_pieces(const uint8_t* at, int n, int u, uint4 (&h)[4], uint4 (&l)[4]) {
  const uint4* t = reinterpret_cast<const uint4*>(at);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    h[i] = __ldg(t + i * n + u);
    l[i] = __ldg(t + (4 + i) * n + u);
  }
}

// QXP: the x side of pair unit v for one vector.
struct QXP {
  uint4 h[4], l[4];
  float sx;
  int S0, S1;
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int v) {
    const int nv = cols >> 6;
    const uint8_t* lp = base + gemvq_lp(cols);
    gemvq_ld_pieces(lp, nv, v, h, l);
    const int2 g = __ldg(reinterpret_cast<const int2*>(lp + 128LL * nv) + v);
    S0 = g.x;
    S1 = g.y;
    sx = __ldg(reinterpret_cast<const float*>(lp + 136LL * nv) + v);
  }
};

// QW4P: pair unit v of one Q4_K row.
struct QW4P {
  uint4 h, q0, q1;
  __device__ __forceinline__ void load(const uint8_t* row, int v) {
    const uint8_t* b = row + (long long)(v >> 2) * 144;
    h = __ldg(reinterpret_cast<const uint4*>(b));
    q0 = ld_stream(b + 16 + 32 * (v & 3));
    q1 = ld_stream(b + 32 + 32 * (v & 3));
  }
  // acc += this unit's dot product with x (one vector).
  __device__ __forceinline__ void dot(int v, const QXP& x, float& acc) const {
    const int j = v & 3;
    uint32_t sw, mw;
    k4_scale_words(h, j, sw, mw);
    const int k = (2 * j) & 3;
    const int sc0 = (int)__byte_perm(sw, 0, 0x4440 | k), sc1 = (int)__byte_perm(sw, 0, 0x4441 + k);
    const int m0 = (int)__byte_perm(mw, 0, 0x4440 | k), m1 = (int)__byte_perm(mw, 0, 0x4441 + k);
    // Four independent chains for the high bytes (low nibbles of each
    // half against x's pieces 0 and 1, high nibbles against 2 and 3), then
    // the low bytes on top of them shifted, as QW4::dot does per half.
    int h0 = 0, h1 = 0, h2 = 0, h3 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t a = qword(q0, i), b = qword(q1, i);
      h0 = dp4a_ss(a & 0x0F0F0F0Fu, qword(x.h[0], i), h0);
      h2 = dp4a_ss(b & 0x0F0F0F0Fu, qword(x.h[1], i), h2);
      h1 = dp4a_us(a & 0xF0F0F0F0u, qword(x.h[2], i), h1);
      h3 = dp4a_us(b & 0xF0F0F0F0u, qword(x.h[3], i), h3);
    }
    int i0 = (int)((uint32_t)(h0 + h2) << 8), i1 = (int)((uint32_t)(h1 + h3) << 8);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t a = qword(q0, i), b = qword(q1, i);
      i0 = dp4a_uu(a & 0x0F0F0F0Fu, qword(x.l[0], i), i0);
      i1 = dp4a_uu(a & 0xF0F0F0F0u, qword(x.l[2], i), i1);
      i0 = dp4a_uu(b & 0x0F0F0F0Fu, qword(x.l[1], i), i0);
      i1 = dp4a_uu(b & 0xF0F0F0F0u, qword(x.l[3], i), i1);
    }
    const int t = sc0 * i0 + sc1 * (i1 >> 4);
    const int m = m0 * x.S0 + m1 * x.S1;
    const float d = h2f(h.x & 0xFFFF), dmin = h2f(h.x >> 16);
    const float f = fmaf(-dmin, (float)m, d * (float)t);
    acc = fmaf(x.sx, f, acc);
  }
};

// gemvq_p_body: Y = W x for one Q4_K matrix (16-byte aligned rows) and
// one quantized vector; a block owns R rows, its warps split each row's
// pair units (gemvq_walk: UN in flight, the first UN loaded before
// pdl_wait). QX: the x side (QXP, or another unit's x arrangement).
template <int R, int UN, class QX = QXP>
__device__ __forceinline__ void gemvq_p_body(const uint8_t* W, long long rb, float* Y, int rows, int cols,
                                             const uint8_t* XQ) {
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][1];
  zero_acc(acc);
  gemvq_walk<QW4P, QX, 1, R, UN>(rp, cols >> 6, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

#define GEMVQ_P(NAME, R, UN)                                                                       \
  extern "C" __global__ void __launch_bounds__(256) NAME(const uint8_t* W, long long rb, float* Y, \
                                                         int rows, int cols, const uint8_t* XQ) {  \
    gemvq_p_body<R, UN>(W, rb, Y, rows, cols, XQ);                                                 \
  }
// 4 rows, one unit a lane in flight (o 4096x4096: 2 warps, every weight in
// flight before the wait); 2 rows, two units a lane (down's 4096x14336:
// one warp a block).
GEMVQ_P(gemvq_p4_1, 4, 1)
GEMVQ_P(gemvq_p2u2_1, 2, 2)

// ---- Pair units with a block's rows split around the wait (gemvq_ps*) ----
//
// Why: the 8b shape's q/k/v (6144 x 4096 over three matrices) ran in
// gemvq_fused_1 (32-element units, half of a lane's weights in flight
// before the wait), because the pair kernel's 4-row blocks (1536) do not
// fit the device in one wave. In blocks of 6 rows (1024) they do, and how
// many of those rows to load before the wait is a trade: x, loaded after
// the wait, arrives behind every weight already in flight, and the dot
// products wait for it. Of 4, 5 and 6 rows before the wait, 4 was the
// fastest alone and as fast as 5 in the decode step, and all three beat
// gemvq_fused_1. The same split for o made the step slower: there
// attention runs long enough before o for all of gemvq_p4_1's weights to
// land before the wait, so its x is not held up, and a row loaded after
// it is a loss.
//
// gemvq_ps_body: plain mode's row group bid of R rows over up to three
// Q4_K matrices (gemvq_segment; 16-byte aligned rows of at most 4096
// columns): lane u holds pair unit u (u < cols / 64) of every row; rows
// 0..RPRE-1 are loaded before the wait, the rest after x. The lanes, sums
// and reduction are gemvq_p4_1's. gemvq_split_rows is the lane's part of
// it, for any unit of 64 columns (QW) and its x (QX): gemvq_q6ka_ps_body
// too.
template <class QW, class QX, int R, int RPRE>
__device__ __forceinline__ void gemvq_split_rows(const uint8_t* const (&rp)[R], int cols, const uint8_t* XQ,
                                                 float (&acc)[R][1]) {
  const int u = threadIdx.x, nv = cols >> 6;
  QW w[R];
  if (u < nv)
#pragma unroll
    for (int r = 0; r < RPRE; r++) w[r].load(rp[r], u);
  pdl_trigger();
  pdl_wait();
  zero_acc(acc);
  if (u < nv) {
    QX x;
    x.load(XQ, cols, u);
#pragma unroll
    for (int r = RPRE; r < R; r++) w[r].load(rp[r], u);
#pragma unroll
    for (int r = 0; r < R; r++) w[r].dot(u, x, acc[r][0]);
  }
}
template <int R, int RPRE>
__device__ __forceinline__ void gemvq_ps_body(const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                              const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                              const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                                              const uint8_t* XQ, int bid) {
  __shared__ float red[2 * R];
  const uint8_t* rp[R];
  int row0, rows;
  float* Y;
  gemvq_segment<R>(bid, W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, rp, row0, rows, Y);
  float acc[R][1];
  gemvq_split_rows<QW4P, QXP, R, RPRE>(rp, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// Instance (gemvqPairGeometry: 32 or 64 threads, one wave): 6 rows, 4
// before the wait.
#define GEMVQ_PS(NAME, R, RPRE)                                                                                 \
  extern "C" __global__ void __launch_bounds__(64) NAME(                                                       \
      const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1, long long rb1, float* Y1,     \
      int rows1, const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols, const uint8_t* XQ) {        \
    gemvq_ps_body<R, RPRE>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ, blockIdx.x);  \
  }
GEMVQ_PS(gemvq_ps6_1, 6, 4)

// ---- Q6_K ----
//
// gemv.cu's DQ6K unit on quantized x: 64 elements of one super-block's
// half n = (u>>1)&1, columns 128n + 32qq + 16h + j for quarters qq = 0..3
// and j < 16, h = u&1, from 16 bytes of each of the half's two low-bit
// regions and 16 bytes of its high bits, read with word loads (210-byte
// blocks are only 2-byte aligned). Per quarter (one int8 scale): q in
// 0..63 against x's high and low bytes in two dp4a chains, minus 32 times
// the quarter's x sum, all exact in int32 (|.| < 2^26); the quarter's
// scale applied in float32, then d and x's block scale per 64-block.
struct QW6 {
  uint32_t a[4], c[4], hb[4];
  uint32_t sc;  // the unit's 4 int8 scales, quarter qq in byte qq
  float d;
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
  // load_a: the same unit of a re-laid row (T_Q6_KA, common.cuh): three
  // aligned 16-byte streamed loads, the scale word and d.
  __device__ __forceinline__ void load_a(const uint8_t* row, int u) {
    const uint8_t* b = row + (long long)(u >> 2) * 210;
    const int p = q6ka_pad(b), k = u & 3;
    const uint8_t* q = b + p + 48 * k;
    const uint4 A = ld_stream(q), C = ld_stream(q + 16), H = ld_stream(q + 32);
    a[0] = A.x; a[1] = A.y; a[2] = A.z; a[3] = A.w;
    c[0] = C.x; c[1] = C.y; c[2] = C.z; c[3] = C.w;
    hb[0] = H.x; hb[1] = H.y; hb[2] = H.z; hb[3] = H.w;
    sc = q6ka_scales(b, p, k);
    d = q6ka_d(b, p);
  }
};

// The x side of Q6_K unit u for one vector: each quarter's 16 high and low
// bytes, the scales of the unit's two 64-blocks (quarters 0-1, 2-3) and the
// quarters' x sums.
struct QX6 {
  uint4 xh[4], xl[4];
  float sx0, sx1;
  int2 s01, s23;
  // From L6 (common.cuh), where a warp's lanes, on consecutive units, read
  // each piece as 512 contiguous bytes.
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int nu = cols >> 6;
    const uint8_t* l6 = base + gemvq_l6(cols);
    gemvq_ld_pieces(l6, nu, u, xh, xl);
    const int4 g = __ldg(reinterpret_cast<const int4*>(l6 + 128LL * nu) + u);
    s01 = make_int2(g.x, g.y);
    s23 = make_int2(g.z, g.w);
    const float2 f = __ldg(reinterpret_cast<const float2*>(l6 + 144LL * nu) + u);
    sx0 = f.x;
    sx1 = f.y;
  }
};

// q6_dot_with: a Q6_K unit's dot product with x (acc += d * (sx0 * (its
// first two quarters) + sx1 * (its last two))), where quarter(qq, q) sets
// quarter qq's 16 six-bit weights, four to a word, from the unit's
// layout: q6_dot's for QW6 (T_Q6_KA's and Q6_K's); the quarter is a
// parameter so that another layout of the unit's bytes can share the
// sums, scales and float update.
template <class Quarter>
__device__ __forceinline__ void q6_dot_with(Quarter quarter, uint32_t sc, float d, const QX6& x, float& acc) {
  float f0 = 0.0f, f1 = 0.0f;
#pragma unroll
  for (int qq = 0; qq < 4; qq++) {
    uint32_t q[4];
    quarter(qq, q);
    int hsum = 0;
#pragma unroll
    for (int jj = 0; jj < 4; jj++) hsum = dp4a_us(q[jj], qword(x.xh[qq], jj), hsum);
    const int s = qq == 0 ? x.s01.x : (qq == 1 ? x.s01.y : (qq == 2 ? x.s23.x : x.s23.y));
    int i = (int)((uint32_t)hsum << 8) - 32 * s;
#pragma unroll
    for (int jj = 0; jj < 4; jj++) i = dp4a_uu(q[jj], qword(x.xl[qq], jj), i);
    const float scf = (float)(int8_t)((sc >> (8 * qq)) & 0xff);
    if (qq < 2) {
      f0 = fmaf(scf, (float)i, f0);
    } else {
      f1 = fmaf(scf, (float)i, f1);
    }
  }
  acc = fmaf(d * x.sx0, f0, acc);
  acc = fmaf(d * x.sx1, f1, acc);
}

__device__ __forceinline__ void q6_dot(const QW6& w, const QX6& x, float& acc) {
  q6_dot_with(
      [&](int qq, uint32_t (&q)[4]) {
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
          const uint32_t lo = (qq & 1) ? w.c[jj] : w.a[jj];
          q[jj] = ((lo >> (4 * (qq >> 1))) & 0x0F0F0F0Fu) | (((w.hb[jj] >> (2 * qq)) & 0x03030303u) << 4);
        }
      },
      w.sc, w.d, x, acc);
}

// QW6A: a re-laid Q6_K unit (QW6::load_a) with QW4's interface, for
// gemvq_walk.
struct QW6A : QW6 {
  __device__ __forceinline__ void load(const uint8_t* row, int u) { load_a(row, u); }
  __device__ __forceinline__ void dot(int, const QX6& x, float& acc) const { q6_dot(*this, x, acc); }
};

#define GEMVQ6_R 2

// gemvq_q6k: Y = W x for one Q6_K matrix (any 2-byte alignment) and NB
// quantized vectors; a block owns 2 rows, its warps split the row's units
// as gemvq_fused's do. The first unit's weights are in flight before
// pdl_wait, each next one loaded after the current one's dot products.
template <int NB>
__device__ __forceinline__ void gemvq_q6k_body(const uint8_t* W, long long rb, float* Y, int rows, int cols,
                                               const uint8_t* XQ, int bid) {
  constexpr int R = GEMVQ6_R;
  __shared__ float red[8 * R * NB];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int row0 = bid * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][NB];
  zero_acc(acc);
  const int nunits = cols >> 6;
  const long long qb = gemvq_bytes(cols);
  int u = warp * 32 + lane;
  QW6 w[R];
  if (u < nunits)
#pragma unroll
    for (int r = 0; r < R; r++) w[r].load(rp[r], u);
  pdl_trigger();
  pdl_wait();
  for (; u < nunits; u += 32 * nw) {
#pragma unroll
    for (int b = 0; b < NB; b++) {
      QX6 x;
      x.load(XQ + b * qb, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) q6_dot(w[r], x, acc[r][b]);
    }
    if (u + 32 * nw < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[r].load(rp[r], u + 32 * nw);
  }
  gemv_rows_store<R, NB>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
}

#define GEMVQ_Q6K(NB)                                                                                     \
  extern "C" __global__ void __launch_bounds__(256) gemvq_q6k_##NB(const uint8_t* W, long long rb, float* Y, \
                                                                   int rows, int cols, const uint8_t* XQ) {  \
    gemvq_q6k_body<NB>(W, rb, Y, rows, cols, XQ, blockIdx.x);                                               \
  }
GEMVQ_Q6K(1)
GEMVQ_Q6K(2)

// ---- A MoE layer's picked experts, the picks read on the device ----
//
// The experts of a layer held in device memory are a table of three
// pointers an expert (gate, up, down; 0 for an expert the device does not
// hold), and the token's k picks are moe_topk's ids. Row y of the grid
// takes pick y: it looks the expert up and returns at once for one the
// device does not hold (the CPU computes that pick) or an id out of range.
// The host then launches the same few kernels whatever the routing, before
// the routing reaches it, and a layer whose picks the device holds needs
// no host at all. The ids are the previous kernel's output, so these wait
// (pdl_wait) before reading them, with no weights in flight early.

// moe_pick is pick y's part (0 gate, 1 up, 2 down) in the table, or null.
__device__ __forceinline__ const uint8_t* moe_pick(const unsigned long long* table, const int* ids, int E, int y,
                                                   int part) {
  const int e = ids[y];
  if (e < 0 || e >= E) return nullptr;
  return reinterpret_cast<const uint8_t*>(table[3LL * e + part]);
}

// gemvq_moe_glu: G[y] = act(gate x) * (up x) for each pick y the device
// holds (Q4_K gate and up of rows x cols, row bytes rb), as gemvq_fused_1
// computes it in a GLU mode; the picks are tokens' k each in token order,
// token t's x quantized at XQ's vector t (a pass of several tokens reads
// each pick's expert on its own: where the picks are about as many as the
// layer's experts, its weights are read about once either way, and the
// launches stay two a layer). Block (0, y) writes where[y]: y for a pick
// computed here, -1 for another (moe_combine's map).
extern "C" __global__ void __launch_bounds__(256) gemvq_moe_glu(const unsigned long long* table, const int* ids,
                                                                int E, long long rb, float* G, int rows, int cols,
                                                                const uint8_t* XQ, int mode, int* where, int k) {
  pdl_trigger();
  pdl_wait();
  const int y = blockIdx.y;
  const uint8_t* gate = moe_pick(table, ids, E, y, 0);
  const uint8_t* up = moe_pick(table, ids, E, y, 1);
  if (blockIdx.x == 0 && threadIdx.x == 0) where[y] = gate != nullptr && up != nullptr ? y : -1;
  if (gate == nullptr || up == nullptr) return;
  gemvq_body<1, 1>(gate, rb, G + (long long)y * rows, rows, up, rb, nullptr, rows, nullptr, 0, nullptr, 0, cols,
                   XQ + (long long)(y / k) * gemvq_bytes(cols), mode, blockIdx.x);
}

// gemvq_moe_down_q4 and _q6: OUT[y] = down_y G[y] for each pick y the
// device holds (Q4_K or Q6_K down of rows x cols, row bytes rb), each on
// its own quantized vector (XQ holds k of them), as gemvq_fused_1 and
// gemvq_q6k_1 compute it.
template <bool Q6>
__device__ __forceinline__ void gemvq_moe_down(const unsigned long long* table, const int* ids, int E, long long rb,
                                               float* OUT, int rows, int cols, const uint8_t* XQ) {
  pdl_trigger();
  pdl_wait();
  const int y = blockIdx.y;
  const uint8_t* W = moe_pick(table, ids, E, y, 2);
  if (W == nullptr) return;
  float* Y = OUT + (long long)y * rows;
  const uint8_t* xq = XQ + y * gemvq_bytes(cols);
  if constexpr (Q6) {
    gemvq_q6k_body<1>(W, rb, Y, rows, cols, xq, blockIdx.x);
  } else {
    gemvq_body<1, 1>(W, rb, Y, rows, nullptr, 0, nullptr, 0, nullptr, 0, nullptr, 0, cols, xq, GLU_PLAIN, blockIdx.x);
  }
}

#define GEMVQ_MOE_DOWN(NAME, Q6)                                                                                   \
  extern "C" __global__ void __launch_bounds__(256) NAME(const unsigned long long* table, const int* ids, int E,  \
                                                         long long rb, float* OUT, int rows, int cols,           \
                                                         const uint8_t* XQ) {                                    \
    gemvq_moe_down<Q6>(table, ids, E, rb, OUT, rows, cols, XQ);                                                  \
  }
GEMVQ_MOE_DOWN(gemvq_moe_down_q4, false)
GEMVQ_MOE_DOWN(gemvq_moe_down_q6, true)

// 16-byte asynchronous copy global -> shared (cp.async, compute_80 on;
// a plain copy below, where the waits are no-ops and the barrier after
// them orders the copies).
__device__ __forceinline__ void cp_async16(uint4* dst, const uint4* src) {
#if __CUDA_ARCH__ >= 800
  const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(src));
#else
  *dst = __ldg(src);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;");
#endif
}

// Waits until at most n (0 or 1) of this thread's commit groups are pending.
__device__ __forceinline__ void cp_async_wait(int n) {
#if __CUDA_ARCH__ >= 800
  if (n == 0) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  } else {
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  }
#endif
}

#define GEMVQ6S_R 4
#define GEMVQ6S_CH 2

// gemvq_q6k_s: gemvq_q6k's work with the block's 4 rows staged in shared
// memory by coalesced 16-byte cp.async (rb % 16 == 0, W 16-aligned; the
// launcher checks), issued before pdl_wait in two commit groups, each a
// half of every row's bytes: the block computes the super-blocks of the
// first half while the second is in flight. Thread t takes units t, t+T,
// ... of the first half's super-blocks, then the same of the rest (T =
// blockDim.x). 4*rb bytes of dynamic shared memory.
// Why: the direct kernel reads each 64-element unit with 4-byte loads
// (Q6_K blocks are 210 bytes, so 16-byte loads do not line up); a warp's
// 4-byte load touches words spread over ~1.7 KB of 8 super-blocks, ~16 L1
// wavefronts per 128 useful bytes, and with few bytes in flight per
// thread it streams well below the copy bandwidth. Staged, the tall
// matrices (the output projection, down) stream much faster; 2 rows per
// block, or a single commit group, were slower than 4 rows in two.
template <int NB>
__device__ __forceinline__ void gemvq_q6k_s_body(const uint8_t* W, long long rb, float* Y, int rows, int cols,
                                                 const uint8_t* XQ) {
  constexpr int R = GEMVQ6S_R, CH = GEMVQ6S_CH;
  extern __shared__ uint4 q6s[];
  __shared__ float red[8 * R * NB];
  const int row0 = blockIdx.x * R, T = blockDim.x;
  const int chunks = (int)(rb >> 4);
#pragma unroll
  for (int c = 0; c < CH; c++) {
    const int a = c * chunks / CH, e = (c + 1) * chunks / CH;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint4* src = reinterpret_cast<const uint4*>(W + (long long)min(row0 + r, rows - 1) * rb);
      for (int i = a + (int)threadIdx.x; i < e; i += T) cp_async16(q6s + r * chunks + i, src + i);
    }
    cp_async_commit();
  }
  pdl_trigger();
  pdl_wait();
  float acc[R][NB];
  zero_acc(acc);
  const long long qb = gemvq_bytes(cols);
  int s0 = 0;
#pragma unroll
  for (int c = 0; c < CH; c++) {
    // Super-blocks whole within the chunks copied so far.
    const int s1 = c == CH - 1 ? (cols >> 8) : (16 * ((c + 1) * chunks / CH)) / 210;
    cp_async_wait(CH - 1 - c);
    __syncthreads();
    for (int u = 4 * s0 + (int)threadIdx.x; u < 4 * s1; u += T) {
      QX6 x[NB];
#pragma unroll
      for (int b = 0; b < NB; b++) x[b].load(XQ + b * qb, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) {
        QW6 w;
        w.load(reinterpret_cast<const uint8_t*>(q6s + r * chunks), u);
#pragma unroll
        for (int b = 0; b < NB; b++) q6_dot(w, x[b], acc[r][b]);
      }
    }
    s0 = s1;
  }
  gemv_rows_store<R, NB>(acc, red, T >> 5, R, GLU_PLAIN, row0, rows, Y);
}

#define GEMVQ_Q6K_S(NB)                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) gemvq_q6k_s_##NB(const uint8_t* W, long long rb, float* Y, \
                                                                     int rows, int cols, const uint8_t* XQ) {  \
    gemvq_q6k_s_body<NB>(W, rb, Y, rows, cols, XQ);                                                           \
  }
GEMVQ_Q6K_S(1)
GEMVQ_Q6K_S(2)

// gemvq_q6ka: Y = W x for a re-laid Q6_K matrix (T_Q6_KA, re-laid at the
// address it is read at) and NB quantized vectors, with gemvq_fused's
// structure: a block owns R rows, its warps split a row's units, UN units
// per lane in flight (gemvq_walk); gemvq_q6k's dot products.
template <int NB, int R, int UN>
__device__ __forceinline__ void gemvq_q6ka_body(const uint8_t* W, long long rb, float* Y, int rows, int cols,
                                                const uint8_t* XQ, int bid) {
  __shared__ float red[8 * R * NB];
  const int row0 = bid * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][NB];
  zero_acc(acc);
  gemvq_walk<QW6A, QX6, NB, R, UN>(rp, cols >> 6, cols, XQ, acc);
  gemv_rows_store<R, NB>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// Instances (kernels' gemvq6aGeometry picks one): 4 rows per block, one
// unit in flight; 2 rows for two vectors; and gemvq_q6ka_r2u2_1, 2 rows a
// block of one warp with two units in flight, for launches whose blocks
// fit the device in one wave (down 4096x14336: 2048 blocks), so that every
// block has its first units in flight before the wait.
#define GEMVQ6A_R 4
#define GEMVQ_Q6KA(NAME, NB, R, UN)                                                                  \
  extern "C" __global__ void __launch_bounds__(256) NAME(const uint8_t* W, long long rb, float* Y, \
                                                         int rows, int cols, const uint8_t* XQ) {  \
    gemvq_q6ka_body<NB, R, UN>(W, rb, Y, rows, cols, XQ, blockIdx.x);                              \
  }
GEMVQ_Q6KA(gemvq_q6ka_1, 1, GEMVQ6A_R, 1)
GEMVQ_Q6KA(gemvq_q6ka_2, 2, 2, 1)
GEMVQ_Q6KA(gemvq_q6ka_r2u2_1, 1, 2, 2)

// ---- Column slices with their own x (gemvq_sk_*) ----
//
// Why: a decode step's down projection (4096 x 14336 in an 8b) reads x
// that gate/up has just written in floats; the other integer GEMVs find
// theirs quantized by the kernel before them (RMSNormQ, AddRMSNormQ,
// AttentionDecodeQ), down needed a gemvq_x launch of its own, one more
// dependent launch, ramp and tail a layer. These kernels quantize x themselves, each block only the
// slice it reads, so no block waits on another: a block owns 1024 columns
// (16 64-blocks) and RC rows; after the wait its warps quantize the
// slice's 64-blocks into shared memory (quant64, as gemvq_x: the same
// integer x), then each warp walks its rows two at a time (lanes 0-15 row
// a, 16-31 row b, lane u & 15 one unit of the slice) with UN row pairs in
// flight, the first UN loaded before the wait. A row's sum over the slice
// (16 lane sums added by shuffles) is added to the row's accumulator in
// common.cuh's fixed point (gemv_fx) by a 64-bit integer atomic: integer
// sums do not depend on the order the blocks finish in, so the result is
// the same bits every run, as float atomics' would not be, without the
// fences and second pass over partials that ordered float sums cost (both
// slower). The consumers
// (add_fx, add_fx_rmsnorm) convert the sums; add_fx zeroes what it read,
// add_fx_rmsnorm leaves that to the next launch here (Z below).
//
// SliceP / Slice6: NV 64-blocks of x quantized by quant64 in shared
// memory, arranged as LP (common.cuh; QXP, the pair units' x) and as L6
// (QX6; unit u reads 64-blocks u & ~1 and u | 1). quant: a whole warp
// quantizes 64-block b of the slice at X; load: unit u's x.
// slice_put writes a lane's two x_int (q0, q1) at bytes j, j+1 of piece pc
// (their high bytes) and 4 + pc (their low bytes) of unit un.
template <int NV>
__device__ __forceinline__ void slice_put(uint4 (&pcs)[8][NV], int pc, int un, int j, int q0, int q1) {
  reinterpret_cast<uint16_t*>(&pcs[pc][un])[j >> 1] = (uint16_t)(((q0 >> 8) & 0xff) | (((q1 >> 8) & 0xff) << 8));
  reinterpret_cast<uint16_t*>(&pcs[4 + pc][un])[j >> 1] = (uint16_t)((q0 & 0xff) | ((q1 & 0xff) << 8));
}

template <int NV>
struct SliceP {
  uint4 pcs[8][NV];
  int2 ssum[NV];
  float ssx[NV];
  __device__ __forceinline__ void quant(const float* X, int b) {
    quant(reinterpret_cast<const float2*>(X + 64 * b)[threadIdx.x & 31], b);
  }
  // The same for the lane's two elements v of 64-block b, already loaded.
  __device__ __forceinline__ void quant(float2 v, int b) {
    const int lane = threadIdx.x & 31;
    int q0, q1, s;
    float sx;
    quant64(v, q0, q1, sx, s);
    const int e = 2 * lane;
    slice_put(pcs, e >> 4, b, e & 15, q0, q1);
    const int s8 = __shfl_down_sync(0xffffffffu, s, 8);
    if (lane == 0) {
      ssum[b].x = s + s8;
      ssx[b] = sx;
    }
    if (lane == 16) ssum[b].y = s + s8;
  }
  __device__ __forceinline__ void load(int u, QXP& x) const {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x.h[i] = pcs[i][u];
      x.l[i] = pcs[4 + i][u];
    }
    x.S0 = ssum[u].x;
    x.S1 = ssum[u].y;
    x.sx = ssx[u];
  }
};

template <int NV>
struct Slice6 {
  uint4 pcs[8][NV];
  int4 ssum[NV];
  float2 ssx[NV];
  __device__ __forceinline__ void quant(const float* X, int B) {
    quant(reinterpret_cast<const float2*>(X + 64 * B)[threadIdx.x & 31], B);
  }
  __device__ __forceinline__ void quant(float2 v, int B) {  // gemvq_put6's arrangement, local to the slice
    const int lane = threadIdx.x & 31;
    int q0, q1, s;
    float sx;
    quant64(v, q0, q1, sx, s);
    const int p = 2 * lane, t = B & 1;
    slice_put(pcs, 2 * t + (p >> 5), B - t + ((p >> 4) & 1), p & 15, q0, q1);
    if ((lane & 7) == 0) {
      const int g = lane >> 3;
      reinterpret_cast<int*>(&ssum[B - t + (g & 1)])[2 * t + (g >> 1)] = s;
    }
    if (lane == 0) {
      reinterpret_cast<float*>(&ssx[B - t])[t] = sx;
      reinterpret_cast<float*>(&ssx[B - t + 1])[t] = sx;
    }
  }
  __device__ __forceinline__ void load(int u, QX6& x) const {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x.xh[i] = pcs[i][u];
      x.xl[i] = pcs[4 + i][u];
    }
    const int4 g4 = ssum[u];
    x.s01 = make_int2(g4.x, g4.y);
    x.s23 = make_int2(g4.z, g4.w);
    x.sx0 = ssx[u].x;
    x.sx1 = ssx[u].y;
  }
};

// gemvq_sk_walk: a block's walk of its RC rows through one slice of
// 1024 columns. Blocks are
// ordered slice-fastest (block b: rows (b / slices) * RC.., slice b %
// slices), WP warps a block; warp w's row pairs are rows RC rc + 2 (w + WP
// k) + {0, 1}, k < RC / (2 WP), a count known at compile time (the same walk
// with a runtime count ran markedly slower); lane u = lane & 15 takes
// unit v = 16 sl + u of each.
// The first UN pairs' weights are loaded before the wait; after it,
// getx(rc, sl, warp, u, x) sets the lane's x of unit v; emit(r, sum) takes each
// row's sum over the slice (lane u == 0; rows past the end read the last
// row and are not emitted). eachx(u, x), before every dot product, may set
// x again (say, from shared memory each time; the default keeps the x getx
// set).
struct SKKeepX {
  template <class QX>
  __device__ __forceinline__ void operator()(int, QX&) const {}
};
template <class QW, class QX, int RC, int UN, int WP, class GetX, class Emit, class EachX = SKKeepX>
__device__ __forceinline__ void gemvq_sk_walk(const uint8_t* W, long long rb, int rows, int cols, GetX getx, Emit emit,
                                              EachX eachx = EachX()) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int u = lane & 15, half = lane >> 4;
  const int nslices = cols >> 10;
  const int rc = blockIdx.x / nslices, sl = blockIdx.x - rc * nslices;
  const int v = sl * 16 + u;
  constexpr int NP = RC / (2 * WP);
  auto row = [&](int k) { return rc * RC + 2 * (warp + WP * k) + half; };
  auto rowp = [&](int k) { return W + (long long)min(row(k), rows - 1) * rb; };
  QW w[UN];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (j < NP) w[j].load(rowp(j), v);
  pdl_trigger();
  pdl_wait();
  QX x;
  getx(rc, sl, warp, u, x);
  for (int k0 = 0; k0 < NP; k0 += UN) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int k = k0 + j;
      if (k < NP) {
        eachx(u, x);
        float acc = 0.0f;
        w[j].dot(v, x, acc);
        if (k + UN < NP) w[j].load(rowp(k + UN), v);
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (u == 0 && row(k) < rows) emit(row(k), acc);
      }
    }
  }
}

// gemvq_sk_body: the walk above for one vector of floats X (cols % 1024
// == 0, 8-byte aligned) into A (rows accumulators). Z, when not null, is
// another rows accumulators the launch zeroes (the first slice's blocks,
// their rows): the engine alternates two, so that the fused norm that
// reads one (add_fx_rmsnorm, a single block whose time is its bytes) need
// not write zeros back.
template <class Slice, class QW, class QX, int RC, int UN, int WP>
__device__ __forceinline__ void gemvq_sk_body(const uint8_t* W, long long rb, long long* A, int rows, int cols,
                                              const float* X, long long* Z) {
  __shared__ Slice slice;
  gemvq_sk_walk<QW, QX, RC, UN, WP>(
      W, rb, rows, cols,
      [&](int rc, int sl, int warp, int u, QX& x) {
        if (Z != nullptr && sl == 0)
          for (int r = threadIdx.x; r < RC; r += 32 * WP)
            if (rc * RC + r < rows) Z[rc * RC + r] = 0;
        for (int b = warp; b < 16; b += WP) slice.quant(X + 1024LL * sl, b);
        __syncthreads();
        slice.load(u, x);
      },
      [&](int r, float acc) { atomicAdd(reinterpret_cast<unsigned long long*>(A) + r, (unsigned long long)gemv_fx(acc)); });
}

// Instances (kernels' gemvSKGeometry: gemvSKRows there must match RC
// here): Q4_K pair units, 256 rows a block of 8 warps (down 4096 x 14336:
// 16 x 14 = 224 blocks, two a multiprocessor), 4 pairs in flight; Q6KA
// units, 240 rows (18 x 14 = 252), 3 in flight. Alone, 16 warps a block
// were faster; in the step, between gate/up and q/k/v, blocks that fill a
// multiprocessor cannot start early beside their neighbours' blocks, and
// 8 warps won.
#define GEMVQ_SK(NAME, SLICE, QW, QX, RC, UN, WP)                                                           \
  extern "C" __global__ void __launch_bounds__(32 * WP) NAME(const uint8_t* W, long long rb, long long* A, \
                                                              int rows, int cols, const float* X,           \
                                                              long long* Z) {                               \
    gemvq_sk_body<SLICE, QW, QX, RC, UN, WP>(W, rb, A, rows, cols, X, Z);                                   \
  }
GEMVQ_SK(gemvq_sk_p, SliceP<16>, QW4P, QXP, 256, 4, 8)
GEMVQ_SK(gemvq_sk_q6ka, Slice6<16>, QW6A, QX6, 240, 3, 8)

// q6ka_relay re-lays n Q6_K super-blocks at W in place into T_Q6_KA
// (common.cuh) for the address each block sits at; one thread per block.
// W must be 2-byte aligned and at the 16-byte alignment the GEMVs will
// read it at (the same pointer). Runs once per resident matrix at upload,
// outside any decode step (no programmatic dependent launch).
extern "C" __global__ void __launch_bounds__(256) q6ka_relay(uint8_t* W, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint8_t* b = W + i * 210;
  uint16_t v[105];
#pragma unroll
  for (int k = 0; k < 105; k++) v[k] = reinterpret_cast<const uint16_t*>(b)[k];
  auto byte = [&](int j) -> uint32_t { return (v[j >> 1] >> (8 * (j & 1))) & 0xff; };
  const int p = q6ka_pad(b);
  // Quants: unit k = 2n + h at p + 48k.
  for (int k = 0; k < 4; k++) {
    const int n = k >> 1, h = k & 1;
    for (int j = 0; j < 16; j++) {
      b[p + 48 * k + j] = (uint8_t)byte(64 * n + 16 * h + j);
      b[p + 48 * k + 16 + j] = (uint8_t)byte(64 * n + 32 + 16 * h + j);
      b[p + 48 * k + 32 + j] = (uint8_t)byte(128 + 32 * n + 16 * h + j);
    }
  }
  // Misc: unit k's scales (quarter qq: scale 8n + 2qq + h) at e + 4k + qq,
  // d at 16 (e = 0) or 0 (e = 2), e = p & 2.
  const int e = p & 2;
  for (int k = 0; k < 4; k++)
    for (int qq = 0; qq < 4; qq++) *q6ka_misc(b, p, e + 4 * k + qq) = (uint8_t)byte(192 + 8 * (k >> 1) + 2 * qq + (k & 1));
  for (int j = 0; j < 2; j++) *q6ka_misc(b, p, (e ? 0 : 16) + j) = (uint8_t)byte(208 + j);
}

// gemvq_mixed_1: one vector's gemvq_q6k_1 over one Q6_K matrix (W2; its
// 2-row groups first, blocks 0..g6) and gemvq_fused_1 over up to two
// Q4_K matrices (W0, W1; the 4-row groups after) in one launch: the q/k/v
// projections of a layer whose v is Q6_K (Q4_K_M's layers with more bits
// in v) take one launch where they took two. The Q6_K blocks, slower per
// byte, go first so they are not the grid's tail. The block size is both
// kernels' (gemvqGeometry's: it depends on the columns alone).
//
// gemvq_mixed_body: the Q6_K matrix's 2-row groups first (re-laid, A:
// gemvq_q6ka_body), then the Q4_K ones.
template <bool A>
__device__ __forceinline__ void gemvq_mixed_body(const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                                 const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                                 const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                                                 const uint8_t* XQ) {
  const int g6 = (rows2 + GEMVQ6_R - 1) / GEMVQ6_R;
  if ((int)blockIdx.x < g6) {
    if (A) {
      gemvq_q6ka_body<1, GEMVQ6_R, 1>(W2, rb2, Y2, rows2, cols, XQ, blockIdx.x);
    } else {
      gemvq_q6k_body<1>(W2, rb2, Y2, rows2, cols, XQ, blockIdx.x);
    }
  } else {
    gemvq_body<1, 1>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, nullptr, 0, nullptr, 0, cols, XQ, GLU_PLAIN,
                     blockIdx.x - g6);
  }
}

#define GEMVQ_MIXED(NAME, A, ...)                                                                               \
  extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                                     \
      NAME(const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1, long long rb1, float* Y1, \
           int rows1, const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols, const uint8_t* XQ) {    \
    gemvq_mixed_body<A>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ);                  \
  }
GEMVQ_MIXED(gemvq_mixed_1, false, 256)

// gemvq_mixed_a_1: gemvq_mixed_1 with the Q6_K matrix re-laid (T_Q6_KA):
// its 2-row groups by gemvq_q6ka_body, the Q4_K ones by gemvq_fused_1.
GEMVQ_MIXED(gemvq_mixed_a_1, true, 256)

// gemvq_mixed_a_w2_1: gemvq_mixed_a_1 for blocks of 2 warps, its registers
// held to gemvq_fused_1's (14 blocks a multiprocessor: 73 at most), so
// that the launch has the occupancy of the all-Q4_K q/k/v launch
// (kernels' gemvqMixedName says why).
GEMVQ_MIXED(gemvq_mixed_a_w2_1, true, 64, 14)

// gemvq_mixed_s_1: gemvq_ps6_1 for the q/k/v of a layer whose v is Q6KA
// (kernels' gemvqMixedSplitGeometry): v first, in blocks of 6 rows of 2
// warps, unit u a lane, 4 rows loaded before the wait, x right after it,
// then the other 2 (gemvq_q6ka_ps_body); then q and k in gemvq_ps6_1's
// blocks. 128 registers, 8 blocks a multiprocessor: the 8b shape's 171 +
// 854 blocks fit the device in one wave. It is faster than
// gemvq_mixed_a_w2_1; v in blocks of 4 or 5 rows (more than a wave), or
// all 6 rows before the wait (130 registers, 7 blocks a multiprocessor),
// were slower than both.
template <int R, int RPRE>
__device__ __forceinline__ void gemvq_q6ka_ps_body(const uint8_t* W, long long rb, float* Y, int rows, int cols,
                                                   const uint8_t* XQ, int bid) {
  __shared__ float red[2 * R];
  const int row0 = bid * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][1];
  gemvq_split_rows<QW6A, QX6, R, RPRE>(rp, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}
extern "C" __global__ void __launch_bounds__(64)
    gemvq_mixed_s_1(const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1, long long rb1,
                    float* Y1, int rows1, const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                    const uint8_t* XQ) {
  const int g6 = (rows2 + 5) / 6;
  if ((int)blockIdx.x < g6) {
    gemvq_q6ka_ps_body<6, 4>(W2, rb2, Y2, rows2, cols, XQ, blockIdx.x);
  } else {
    gemvq_ps_body<6, 4>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, nullptr, 0, nullptr, 0, cols, XQ, blockIdx.x - g6);
  }
}
