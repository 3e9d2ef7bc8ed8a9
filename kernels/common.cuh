// Shared device helpers for strata's kernels: type ids (engine/quant's
// numbering), block layouts and the 32-element block decoders every
// weight-reading kernel (GEMV, GEMM, embedding) uses. Layouts follow
// engine/quant/dequant.go (ggml-common.h).
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>

#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30
#define T_INT8 1024
// Q6_K re-laid on the device for aligned loads (kernels' Q6KAligned; not a
// file format): see Part<T_Q6_KA>.
#define T_Q6_KA 1025

// Tr<T>: BE elements per block, BB bytes per block. The float formats and
// INT8Row use a 32-element "block" so every type decodes in 32-element parts.
template <int T> struct Tr;
template <> struct Tr<T_F32>  { enum { BE = 32, BB = 128, NW = 32 }; };
template <> struct Tr<T_F16>  { enum { BE = 32, BB = 64, NW = 16 }; };
template <> struct Tr<T_BF16> { enum { BE = 32, BB = 64, NW = 16 }; };
template <> struct Tr<T_Q4_0> { enum { BE = 32, BB = 18, NW = 4 }; };
template <> struct Tr<T_Q8_0> { enum { BE = 32, BB = 34, NW = 8 }; };
template <> struct Tr<T_Q4_K> { enum { BE = 256, BB = 144, NW = 8 }; };
template <> struct Tr<T_Q5_K> { enum { BE = 256, BB = 176, NW = 8 }; };
template <> struct Tr<T_Q6_K> { enum { BE = 256, BB = 210, NW = 8 }; };
template <> struct Tr<T_INT8> { enum { BE = 32, BB = 32, NW = 8 }; };
template <> struct Tr<T_Q6_KA> { enum { BE = 256, BB = 210, NW = 8 }; };

// Programmatic dependent launch (compute_90; kernels' launchers set
// cuda.LaunchConfig.Overlap for every kernel whose PTX holds
// griddepcontrol.wait). pdl_trigger lets the next kernel on the stream
// start its blocks once every block of this one has triggered; pdl_wait
// blocks until the previous kernel has completed and its writes are
// visible. Why: a decode step is ~300 short dependent launches, and each
// one's launch latency, ramp and tail leave the memory bus idle; with
// these the next kernel is resident early, and a GEMV can have its weights
// in flight (no kernel of a step writes weights) while its predecessor
// finishes. Rule: a kernel calls pdl_trigger and then pdl_wait before it
// reads or writes any memory other than weights, and before any early
// return (a kernel whose blocks all returned unwaited would complete
// before its predecessor and release its dependents early). Both compile
// to nothing below compute_90.
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// PDL_ENTRY is both, first thing in a kernel that prefetches nothing.
#define PDL_ENTRY() \
  do {              \
    pdl_trigger();  \
    pdl_wait();     \
  } while (0)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The fused decode GEMVs' epilogue modes (kernels' GLU numbering): plain
// rows, or gate and up rows combined by SwiGLU or GeGLU.
#define GLU_PLAIN 0
#define GLU_SWIGLU 1
#define GLU_GEGLU 2

// Activations exactly as elementwise.cu's swiglu/geglu.
__device__ __forceinline__ float glu_act(int mode, float g, float u) {
  const double v = g;
  if (mode == GLU_SWIGLU) return __fmul_rn((float)(v / (1.0 + exp(-v))), u);
  const double c = 0.7978845608028654;
  return __fmul_rn((float)(0.5 * v * (1.0 + tanh(c * (v + 0.044715 * v * v * v)))), u);
}

// row_ptrs points rp at the R rows of a block's group from row0 (rows
// past the end repeat the last, whose results are never stored), and
// zero_acc clears its accumulators: the prologue of every GEMV whose
// block owns a group of rows.
template <int R>
__device__ __forceinline__ void row_ptrs(const uint8_t* W, long long rb, int row0, int rows, const uint8_t* (&rp)[R]) {
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
}

template <int R, int NB>
__device__ __forceinline__ void zero_acc(float (&acc)[R][NB]) {
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) acc[r][b] = 0.0f;
}

// gemv_rows_store is the epilogue of the decode GEMVs whose warps split a
// block's rows (gemv.cu's gemv_fused, gemvq.cu's gemvq_fused and
// gemvq_q6k): each lane's partial sums acc[r][b] are summed over the warp,
// then over the block's nw warps in warp order through red (R*NB*nw
// floats of shared memory), and written to Y (NB rows of rows floats) for
// the block's rg rows from row0 — plain, or in GLU modes rows 0..rg/2 of
// gate and rg/2..rg of up combined by glu_act.
template <int R, int NB>
__device__ __forceinline__ void gemv_rows_store(float (&acc)[R][NB], float* red, int nw, int rg, int mode, int row0,
                                                int rows, float* Y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int b = 0; b < NB; b++) acc[r][b] = warp_sum(acc[r][b]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int b = 0; b < NB; b++) red[(warp * R + r) * NB + b] = acc[r][b];
  }
  __syncthreads();
  const int i = threadIdx.x;
  if (mode == GLU_PLAIN) {
    if (i < rg * NB) {
      float s = 0.0f;
      for (int w = 0; w < nw; w++) s += red[w * R * NB + i];
      const int r = i / NB, b = i % NB;
      if (row0 + r < rows) Y[(long long)b * rows + row0 + r] = s;
    }
  } else {
    const int H = rg / 2;
    if (i < H * NB) {
      float g = 0.0f, u = 0.0f;
      for (int w = 0; w < nw; w++) {
        g += red[w * R * NB + i];
        u += red[w * R * NB + H * NB + i];
      }
      const int r = i / NB, b = i % NB;
      if (row0 + r < rows) Y[(long long)b * rows + row0 + r] = glu_act(mode, g, u);
    }
  }
}

// Streamed weight load: non-coherent and not allocated in L1 (each weight
// byte is read once; L1 is kept for x).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
#if __CUDA_ARCH__ >= 800
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#else
  return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}

// N little-endian words starting at an arbitrarily aligned byte address
// (shared or global). Aligned word loads plus funnel shifts; the extra word
// is only read when p is misaligned, so nothing past p+4N is touched.
template <int N>
__device__ __forceinline__ void ldwords(const uint8_t* p, uint32_t* out) {
  const uintptr_t a = (uintptr_t)p;
  const uint32_t* w = (const uint32_t*)(a & ~(uintptr_t)3);
  const uint32_t s = (uint32_t)(a & 3) * 8;
  uint32_t v[N + 1];
#pragma unroll
  for (int i = 0; i < N; i++) v[i] = w[i];
  v[N] = 0;
  if (s) v[N] = w[N];
#pragma unroll
  for (int i = 0; i < N; i++) out[i] = __funnelshift_r(v[i], v[i + 1], s);
}

__device__ __forceinline__ uint32_t ldu16(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

__device__ __forceinline__ float h2f(uint32_t h) {
  return __half2float(__ushort_as_half((unsigned short)h));
}

// Byte k of x (0..127) as the float 0.5 + x/256: the byte lands in the
// mantissa under the exponent of 0.5, so no integer-to-float conversion is
// needed. Callers fold the affine map into one FMA.
__device__ __forceinline__ float half_plus(uint32_t x, int k) {
  return __int_as_float(__byte_perm(x, 0x3F000000u, 0x7044 | (k << 8)));
}

// Signed byte k of x as an exact float: 2^23 + (q+128) built by byte
// permutation, minus 2^23+128.
__device__ __forceinline__ float s8f(uint32_t x, int k) {
  return __int_as_float(__byte_perm(x ^ 0x80808080u, 0x4B000000u, 0x7440 | k)) - 8388736.0f;
}

// Part is one 32-element part of a block, decoded lazily: load() fetches
// its raw words and scales, get4(i, out) yields elements 4i..4i+3.
template <int T> struct Part;

// Q4_K / Q5_K scales and mins of sub-blocks 2j and 2j+1, from the
// super-block's 16-byte header h (words: d and dmin, then the 12 packed
// bytes): bytes (2j)&3 and their successor of sw (scales) and mw (mins).
// engine/quant's k4 packing: j < 2, 6-bit fields in bytes 0..7; j >= 2,
// low nibbles in bytes 8..11 and the high bits in the top two bits of
// bytes 0..7.
__device__ __forceinline__ void k4_scale_words(const uint4& h, int j, uint32_t& sw, uint32_t& mw) {
  if (j < 2) {
    sw = h.y & 0x3F3F3F3Fu;
    mw = h.z & 0x3F3F3F3Fu;
  } else {
    sw = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    mw = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block t from the 12 packed bytes.
__device__ __forceinline__ void k4_scale_min(const uint8_t* s12, int t, float& sc, float& m) {
  uint32_t w[3];
  ldwords<3>(s12, w);
  // Select the word without a run-time array index (which would put w in
  // local memory).
  auto byte = [&](int k) -> uint32_t {
    const uint32_t x = k < 4 ? w[0] : (k < 8 ? w[1] : w[2]);
    return (x >> (8 * (k & 3))) & 0xff;
  };
  if (t < 4) {
    sc = (float)(byte(t) & 63);
    m = (float)(byte(t + 4) & 63);
  } else {
    sc = (float)((byte(t + 4) & 0xf) | ((byte(t - 4) >> 6) << 4));
    m = (float)((byte(t + 4) >> 4) | ((byte(t) >> 6) << 4));
  }
}

template <> struct Part<T_Q4_K> {
  uint32_t q[8];
  float A, B;
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    const float d = h2f(ldu16(b)), dmin = h2f(ldu16(b + 2));
    float sc, m;
    k4_scale_min(b + 4, t, sc, m);
    ldwords<8>(b + 16 + 32 * (t >> 1), q);
    const int sh = 4 * (t & 1);
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = (q[i] >> sh) & 0x0F0F0F0Fu;
    const float a = d * sc;
    A = 256.0f * a;
    B = -dmin * m - 128.0f * a;
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(q[i], k), A, B);
  }
};

template <> struct Part<T_Q5_K> {
  uint32_t q[8];
  float A, B;
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    const float d = h2f(ldu16(b)), dmin = h2f(ldu16(b + 2));
    float sc, m;
    k4_scale_min(b + 4, t, sc, m);
    uint32_t h[8];
    ldwords<8>(b + 16, h);
    ldwords<8>(b + 48 + 32 * (t >> 1), q);
    const int sh = 4 * (t & 1);
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (((h[i] >> t) & 0x01010101u) << 4);
    const float a = d * sc;
    A = 256.0f * a;
    B = -dmin * m - 128.0f * a;
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(q[i], k), A, B);
  }
};

template <> struct Part<T_Q6_K> {
  uint32_t q[8];
  float A0, B0, A1, B1;  // elements 0..15 and 16..31 have their own scale
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    const int n = t >> 2, qq = t & 3;
    uint32_t h[8];
    ldwords<8>(b + 64 * n + 32 * (qq & 1), q);
    ldwords<8>(b + 128 + 32 * n, h);
    const int ns = 4 * (qq >> 1), hs = 2 * qq;
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = ((q[i] >> ns) & 0x0F0F0F0Fu) | (((h[i] >> hs) & 0x03030303u) << 4);
    const float d = h2f(ldu16(b + 208));
    const int si = 192 + 8 * n + 2 * qq;
    scales(d * (float)(int8_t)b[si], d * (float)(int8_t)b[si + 1]);
  }
  // The two 16-element halves' scales d * s (element q - 32 at 256a * (1/2
  // + q/256) - 160a).
  __device__ __forceinline__ void scales(float a0, float a1) {
    A0 = 256.0f * a0; B0 = -160.0f * a0;
    A1 = 256.0f * a1; B1 = -160.0f * a1;
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
    const float A = i < 4 ? A0 : A1, B = i < 4 ? B0 : B1;
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(q[i], k), A, B);
  }
};

// ---- Q6_K re-laid for aligned loads (T_Q6_KA) ----
//
// The same 210 bytes per super-block as Q6_K, each block's bytes permuted
// in place (q6ka_relay, engine/quant's RelayQ6KA) by the block's address
// mod 16: p = (-address) & 15 (even, 0..14) bytes of "misc" first, then the
// 192 quant bytes, 16-byte aligned, then the other 18 - p misc bytes. The
// quants are the block's four 64-element units (gemvq_q6k's; unit k = 2n +
// h of half n) at 48k: the 16 low-bit bytes of quarters 0/2, the 16 of
// quarters 1/3, the 16 high-bit bytes. The 18 misc bytes M are the units'
// scales (unit k's four int8 scales, quarter qq in byte qq, as one word)
// and the f16 d, ordered so that every scale word is 4-byte aligned: where
// p % 4 == 0, M = [scales of units 0..3 | d] (d at block + 208); where
// p % 4 == 2, M = [d | scales] (d at block + 0); the split at p falls
// between words either way. Why: Q6_K's 210-byte blocks are only 2-byte aligned, so its
// GEMVs read words with funnel shifts or stage rows in shared memory,
// well below what Q4_K's aligned 16-byte loads stream; re-laid, a unit is three
// aligned 16-byte loads, a 4-byte load of its scales and a 2-byte one of
// d (Q6_K: 12 word loads with funnel shifts, or shared-memory staging).
// Each block stays in its own 210 bytes, so the
// re-laid matrix has Q6_K's size and row addressing, and kernels that copy
// rows keeping the address mod 16 (gemv_tiled's shared-memory slots) read
// it the same way. The tensor must sit at the 16-byte alignment it was
// re-laid for (strata's allocations are 256-aligned).
__device__ __forceinline__ int q6ka_pad(const uint8_t* b) { return (int)((0u - (uint32_t)(uintptr_t)b) & 15u); }

// Misc byte i of the re-laid block at b with pad p.
__device__ __forceinline__ const uint8_t* q6ka_misc(const uint8_t* b, int p, int i) {
  return b + i + (i >= p ? 192 : 0);
}
__device__ __forceinline__ uint8_t* q6ka_misc(uint8_t* b, int p, int i) { return b + i + (i >= p ? 192 : 0); }

// Unit k's scale word and the block's d.
__device__ __forceinline__ uint32_t q6ka_scales(const uint8_t* b, int p, int k) {
  return *reinterpret_cast<const uint32_t*>(q6ka_misc(b, p, (p & 2) + 4 * k));
}
__device__ __forceinline__ float q6ka_d(const uint8_t* b, int p) {
  return h2f(*reinterpret_cast<const uint16_t*>(b + ((p & 2) ? 0 : 208)));
}

// Part t = 4n + qq of a re-laid block: Part<T_Q6_K>'s elements (columns
// 128n + 32qq + j) and decoding, its 16-element halves h from unit 2n + h.
template <> struct Part<T_Q6_KA> : Part<T_Q6_K> {
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    const int n = t >> 2, qq = t & 3, p = q6ka_pad(b);
    uint32_t h[8];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const uint4* u = reinterpret_cast<const uint4*>(b + p + 48 * (2 * n + hh));
      const uint4 lo = u[qq & 1], hi = u[2];
      q[4 * hh] = lo.x; q[4 * hh + 1] = lo.y; q[4 * hh + 2] = lo.z; q[4 * hh + 3] = lo.w;
      h[4 * hh] = hi.x; h[4 * hh + 1] = hi.y; h[4 * hh + 2] = hi.z; h[4 * hh + 3] = hi.w;
    }
    const int ns = 4 * (qq >> 1), hs = 2 * qq;
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = ((q[i] >> ns) & 0x0F0F0F0Fu) | (((h[i] >> hs) & 0x03030303u) << 4);
    const float d = q6ka_d(b, p);
    const int e = p & 2;
    scales(d * (float)(int8_t)*q6ka_misc(b, p, e + 4 * (2 * n) + qq),
           d * (float)(int8_t)*q6ka_misc(b, p, e + 4 * (2 * n + 1) + qq));
  }
};

template <> struct Part<T_Q4_0> {
  uint32_t q[8];
  float A, B;
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    uint32_t w[4];
    ldwords<4>(b + 2, w);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      q[i] = w[i] & 0x0F0F0F0Fu;
      q[i + 4] = (w[i] >> 4) & 0x0F0F0F0Fu;
    }
    const float d = h2f(ldu16(b));
    A = 256.0f * d;
    B = -136.0f * d;  // -128d for the 0.5 offset, -8d for the nibble bias
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = fmaf(half_plus(q[i], k), A, B);
  }
};

template <> struct Part<T_Q8_0> {
  uint32_t q[8];
  float d;
  __device__ __forceinline__ void load(const uint8_t* b, int t) {
    ldwords<8>(b + 2, q);
    d = h2f(ldu16(b));
  }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = d * s8f(q[i], k);
  }
};

// INT8Row: the per-row scale is applied by the caller.
template <> struct Part<T_INT8> {
  uint32_t q[8];
  __device__ __forceinline__ void load(const uint8_t* b, int t) { ldwords<8>(b, q); }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = s8f(q[i], k);
  }
};

template <> struct Part<T_F16> {
  uint32_t q[16];
  __device__ __forceinline__ void load(const uint8_t* b, int t) { ldwords<16>(b, q); }
  __device__ __forceinline__ void get4(int i, float* o) const {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&q[2 * i]));
    const float2 c = __half22float2(*reinterpret_cast<const __half2*>(&q[2 * i + 1]));
    o[0] = a.x; o[1] = a.y; o[2] = c.x; o[3] = c.y;
  }
};

template <> struct Part<T_BF16> {
  uint32_t q[16];
  __device__ __forceinline__ void load(const uint8_t* b, int t) { ldwords<16>(b, q); }
  __device__ __forceinline__ void get4(int i, float* o) const {
    o[0] = __int_as_float(q[2 * i] << 16);
    o[1] = __int_as_float(q[2 * i] & 0xFFFF0000u);
    o[2] = __int_as_float(q[2 * i + 1] << 16);
    o[3] = __int_as_float(q[2 * i + 1] & 0xFFFF0000u);
  }
};

template <> struct Part<T_F32> {
  uint32_t q[32];
  __device__ __forceinline__ void load(const uint8_t* b, int t) { ldwords<32>(b, q); }
  __device__ __forceinline__ void get4(int i, float* o) const {
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = __uint_as_float(q[4 * i + k]);
  }
};

// Each weight-reading kernel is instantiated once per type and exported
// under a name with the type's suffix.
#define FOR_EACH_TYPE(X) \
  X(T_F32, f32) X(T_F16, f16) X(T_BF16, bf16) X(T_Q4_0, q4_0) X(T_Q8_0, q8_0) \
  X(T_Q4_K, q4_k) X(T_Q5_K, q5_k) X(T_Q6_K, q6_k) X(T_INT8, int8) X(T_Q6_KA, q6_ka)

// ---- Quantized x of the integer GEMVs (gemvq.cu) ----
//
// Per vector of cols floats (cols % 64 == 0; gemvq_bytes(cols) bytes,
// vectors back to back), two copies of the same numbers:
// - L0, read by the Q4_K units (QXU), 2.5*cols bytes: xh[cols] (int8,
//   x_int >> 8), xl[cols] (uint8, x_int & 255), then per 64-block a
//   32-byte header {float sx; 3 zero words; int S[4]} where x ~= sx *
//   x_int (x_int in [-32767, 32767], sx = the block's max |x| / 32767, NaN
//   if the block holds a NaN) and S holds the sums of x_int over the
//   block's 16-element groups in the order 0, 2, 1, 3;
// - L6 (at gemvq_l6(cols)), read by the Q6_K units (QX6), arranged for
//   them: unit u (nu = cols/64 of them; elements 256sb + 128n + 32qq + 16h
//   + j of super-block sb, u = 4sb + 2n + h) has its quarter qq's 16 high
//   bytes at piece qq and its 16 low bytes at piece 4 + qq, piece p of
//   unit u being the 16 bytes at 16*(p*nu + u); then an int4 per unit (the
//   x_int sums of its quarters 0..3) and a float2 per unit (sx of its two
//   64-blocks). Why: a warp's loads of one piece then read 512 contiguous
//   bytes, where reading the units' bytes out of L0 touched 32-byte pairs
//   spread over 2 KB (the Q6KA GEMV on down's shape ran a tenth faster
//   with the same geometry).
// - LP (at gemvq_lp(cols)), read by the Q4_K pair units (QXP: the 64
//   elements of one sub-block pair, one x 64-block): piece i (i < 4: the
//   high bytes of elements 16i..16i+15 of 64-block v; 4 + i: their low
//   bytes) of block v at 16*(i*nv + v), nv = cols/64; then an int2 per
//   block (the x_int sums of its elements 0..31 and 32..63) and a float per
//   block (sx). Why: the same as L6's, for gemvq_p*'s lanes, which read a
//   whole 64-block each.
// gemvq.cu's gemvq_x writes all three from float x; norm.cu's kernels and
// the decode attention write them beside their output (gemvq_put4), so the
// GEMV that follows needs no quantizing launch of its own.
#define GEMVQ_MAX 32767

// Offset of L6 in one vector's quantized x, and the bytes of one vector
// (L0 and L6, rounded up to 16 so that every vector's pieces stay
// 16-byte aligned; kernels' gemvqBytes).
__host__ __device__ __forceinline__ long long gemvq_l6(int cols) { return 2LL * cols + cols / 2; }
__host__ __device__ __forceinline__ long long gemvq_lp(int cols) {
  return (gemvq_l6(cols) + 152LL * (cols / 64) + 15) & ~15LL;
}
__host__ __device__ __forceinline__ long long gemvq_bytes(int cols) {
  return (gemvq_lp(cols) + 140LL * (cols / 64) + 15) & ~15LL;
}

// gemvq_put_piece stores the x_int bytes of N consecutive elements (N = 2
// or 4; high bytes h, low bytes l, the first element in the lowest byte)
// at byte j of pieces k (high) and 4 + k (low) of unit u, in a piece
// layout of n units at at (L6, LP: piece k of unit u is the 16 bytes at
// 16*(k*n + u)).
template <int N>
__device__ __forceinline__ void gemvq_put_piece(uint8_t* at, int n, int k, int u, int j, uint32_t h, uint32_t l) {
  uint8_t* ph = at + 16LL * (k * n + u) + j;
  uint8_t* pl = at + 16LL * ((4 + k) * n + u) + j;
  if (N == 4) {
    *reinterpret_cast<uint32_t*>(ph) = h;
    *reinterpret_cast<uint32_t*>(pl) = l;
  } else {
    *reinterpret_cast<uint16_t*>(ph) = (uint16_t)h;
    *reinterpret_cast<uint16_t*>(pl) = (uint16_t)l;
  }
}

// gemvq_putp writes x_int bytes of N consecutive elements from e0 (N = 2
// or 4, e0 % N == 0) into LP: 64-block v's elements 16i..16i+15 are its
// piece i.
template <int N>
__device__ __forceinline__ void gemvq_putp(uint8_t* base, int cols, int e0, uint32_t h, uint32_t l) {
  gemvq_put_piece<N>(base + gemvq_lp(cols), cols >> 6, (e0 >> 4) & 3, e0 >> 6, e0 & 15, h, l);
}

// gemvq_putp_sum writes half k's (elements 32k..32k+31) x_int sum of
// 64-block B into LP; gemvq_putp_scale its scale.
__device__ __forceinline__ void gemvq_putp_sum(uint8_t* base, int cols, int B, int k, int s) {
  reinterpret_cast<int*>(base + gemvq_lp(cols) + 128LL * (cols >> 6))[2 * B + k] = s;
}
__device__ __forceinline__ void gemvq_putp_scale(uint8_t* base, int cols, int B, float sx) {
  reinterpret_cast<float*>(base + gemvq_lp(cols) + 136LL * (cols >> 6))[B] = sx;
}

// gemvq_put6 writes x_int bytes of N consecutive elements from e0 (N = 2
// or 4, e0 % N == 0) into L6: element 256sb + 128n + 32qq + 16h + j of
// 64-block B = 4sb + 2n + (qq >> 1) is byte j of unit 4sb + 2n + h's piece
// qq.
template <int N>
__device__ __forceinline__ void gemvq_put6(uint8_t* base, int cols, int e0, uint32_t h, uint32_t l) {
  const int B = e0 >> 6, p = e0 & 63, t = B & 1;
  gemvq_put_piece<N>(base + gemvq_l6(cols), cols >> 6, 2 * t + (p >> 5), B - t + ((p >> 4) & 1), p & 15, h, l);
}

// gemvq_put6_sum writes the x_int sum s of 16-element group g of 64-block
// B into L6's per-unit sums; gemvq_put6_scale writes B's scale into the
// per-unit scales of both units that read B.
__device__ __forceinline__ void gemvq_put6_sum(uint8_t* base, int cols, int B, int g, int s) {
  const int nu = cols >> 6, t = B & 1;
  int* sums = reinterpret_cast<int*>(base + gemvq_l6(cols) + 128LL * nu);
  sums[4 * (B - t + (g & 1)) + 2 * t + (g >> 1)] = s;
}
__device__ __forceinline__ void gemvq_put6_scale(uint8_t* base, int cols, int B, float sx) {
  const int nu = cols >> 6, t = B & 1;
  float* sc = reinterpret_cast<float*>(base + gemvq_l6(cols) + 144LL * nu);
  sc[2 * (B - t) + t] = sx;
  sc[2 * (B - t + 1) + t] = sx;
}

// gemvq_put4 writes elements 4i..4i+3 (v) of one vector's quantized x at
// base (gemvq_bytes(cols) bytes). The 16 threads of an aligned half-warp
// hold one 64-block (i = 16*block + (lane & 15)) and must call it
// together. The arithmetic is gemvq.cu's quant64 (the same max, scale,
// rounding and sums), so both writers give the same bytes.
__device__ __forceinline__ void gemvq_put4(uint8_t* base, int cols, int i, float4 v) {
  const unsigned mask = 0xFFFFu << (threadIdx.x & 16);
  float mx = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(mask, mx, o));
  const bool nan = __any_sync(mask, v.x != v.x || v.y != v.y || v.z != v.z || v.w != v.w);
  int q0 = 0, q1 = 0, q2 = 0, q3 = 0;
  float sx = 0.0f;
  if (mx > 0.0f) {
    const float inv = (float)GEMVQ_MAX / mx;
    q0 = min(max(__float2int_rn(v.x * inv), -GEMVQ_MAX), GEMVQ_MAX);
    q1 = min(max(__float2int_rn(v.y * inv), -GEMVQ_MAX), GEMVQ_MAX);
    q2 = min(max(__float2int_rn(v.z * inv), -GEMVQ_MAX), GEMVQ_MAX);
    q3 = min(max(__float2int_rn(v.w * inv), -GEMVQ_MAX), GEMVQ_MAX);
    sx = mx / (float)GEMVQ_MAX;
  }
  if (nan) sx = __int_as_float(0x7fc00000);
  const uint32_t h = ((uint32_t)(q0 >> 8) & 0xffu) | (((uint32_t)(q1 >> 8) & 0xffu) << 8) |
                     (((uint32_t)(q2 >> 8) & 0xffu) << 16) | (((uint32_t)(q3 >> 8) & 0xffu) << 24);
  const uint32_t l = ((uint32_t)q0 & 0xffu) | (((uint32_t)q1 & 0xffu) << 8) | (((uint32_t)q2 & 0xffu) << 16) |
                     (((uint32_t)q3 & 0xffu) << 24);
  *reinterpret_cast<uint32_t*>(base + 4LL * i) = h;
  *reinterpret_cast<uint32_t*>(base + cols + 4LL * i) = l;
  gemvq_put6<4>(base, cols, 4 * i, h, l);
  gemvq_putp<4>(base, cols, 4 * i, h, l);
  int s = q0 + q1 + q2 + q3;
  s += __shfl_xor_sync(mask, s, 1);
  s += __shfl_xor_sync(mask, s, 2);
  const int s2 = s + __shfl_xor_sync(mask, s, 4);  // t = 0: groups 0+1, t = 8: 2+3
  int* hdr = reinterpret_cast<int*>(base + 2LL * cols + 32LL * (i >> 4));
  const int t = i & 15;
  if (t < 4) hdr[t] = t == 0 ? __float_as_int(sx) : 0;
  if (t == 0) {
    gemvq_put6_scale(base, cols, i >> 4, sx);
    gemvq_putp_scale(base, cols, i >> 4, sx);
  }
  if ((t & 7) == 0) gemvq_putp_sum(base, cols, i >> 4, t >> 3, s2);
  if ((t & 3) == 0) {
    const int g = t >> 2;
    hdr[4 + (((g & 1) << 1) | (g >> 1))] = s;
    gemvq_put6_sum(base, cols, i >> 4, g, s);
  }
}

// GEMV fixed point (gemvq.cu's gemvq_sk_*, kernels' GEMVSliced): partial
// products added into 64-bit integer accumulators, 2^-32 a unit, so that
// their sum is exact and independent of the order of the additions (one
// rounding, at gemv_unfx). At most 16 partials a row (kernels' limit):
// finite ones of magnitude below 2^20 sum below 2^56 (GEMV_FX_LIMIT); a
// partial of 2^20 or more, or not a number, adds GEMV_FX_POISON (2^58)
// instead, which leaves the sum at 2^58 - 2^56 or more (and below 2^62:
// nothing wraps), read back as NaN. Why 2^-32: finer than a float's
// rounding of any value above 2^-8, and what the sum is added to (the
// residual stream, of order 1) rounds far coarser; 2^20 is far above what
// a layer's output reaches (fp16 checkpoints cannot pass 65504).
#define GEMV_FX_POISON (1LL << 58)
#define GEMV_FX_LIMIT (1LL << 56)
__device__ __forceinline__ long long gemv_fx(float v) {
  return fabsf(v) < 1048576.0f ? __float2ll_rn(v * 4294967296.0f) : GEMV_FX_POISON;
}
__device__ __forceinline__ float gemv_unfx(long long v) {
  if (v >= GEMV_FX_LIMIT || v <= -GEMV_FX_LIMIT) return __int_as_float(0x7fc00000);
  return __double2float_rn(__ll2double_rn(v) * (1.0 / 4294967296.0));
}
