// q6ka_check.cpp: kernels' Q6KA device code built for the host and run
// against the Q6_K code it replaces (kernels' TestHostBuildQ6KA builds and
// runs it with g++; no GPU needed). For a Q6_K matrix at every even
// address mod 16, q6ka_relay (gemvq.cu) re-lays it, then every unit read by
// QW6::load_a (gemvq.cu) and DQ6KA::load (gemv.cu) must give QW6::load's
// and DQ6K::load's words, and every part read by Part<T_Q6_KA>
// (common.cuh) Part<T_Q6_K>'s values. The CUDA built-ins the code uses
// are shimmed below for one thread; cuda_fp16.h beside this file stands
// in for the toolkit's. dq6.inc is gemv.cu's DQ6K and DQ6KA, cut out by
// the test (the rest of gemv.cu holds PTX-only asm).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <random>
#define __device__
#define __host__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __shared__
#define __restrict__
#include "cuda_fp16.h"
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct float4 { float x, y, z, w; };
struct dim3 { unsigned x = 0, y = 0, z = 0; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;
template <typename T> T __ldg(const T* p) { return *p; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  uint8_t b[8]; memcpy(b, &x, 4); memcpy(b + 4, &y, 4); unsigned r = 0;
  for (int i = 0; i < 4; i++) r |= (unsigned)b[(s >> (4 * i)) & 7] << (8 * i);
  return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) { sh &= 31; return sh ? (lo >> sh) | (hi << (32 - sh)) : lo; }
inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { const unsigned long long o = *p; *p += v; return o; }
inline long long __float2ll_rn(float f) { return std::llrint(f); }
inline double __ll2double_rn(long long v) { return (double)v; }
inline float __double2float_rn(double v) { return (float)v; }
template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <typename T> T __shfl_down_sync(unsigned, T v, int) { return v; }
inline bool __any_sync(unsigned, bool p) { return p; }
inline void __syncthreads() {}
inline void __syncwarp(unsigned = 0xffffffffu) {}
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline int2 make_int2(int a, int b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }
using std::max;
using std::min;
#include "gemvq.cu"
#include "dq6.inc"
uint4 q6s[1];  // gemvq_q6k_s's extern __shared__ array, never used here

static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { if (fails++ < 10) { printf(__VA_ARGS__); printf("\n"); } } } while (0)

int main() {
  std::mt19937 rng(7);
  const int nblk = 40;
  alignas(16) static uint8_t orig[nblk * 210 + 64], rel[nblk * 210 + 64];
  for (int off = 0; off < 16; off += 2) {  // the matrix at every even alignment
    uint8_t* o = orig + off; uint8_t* r = rel + off;
    for (int i = 0; i < nblk * 210; i++) o[i] = rng();
    for (int b = 0; b < nblk; b++) { o[b * 210 + 208] = rng(); o[b * 210 + 209] = 0x3c ^ (rng() & 3); }  // d ~ 1
    memcpy(r, o, nblk * 210);
    blockDim.x = 256;
    for (blockIdx.x = 0; blockIdx.x < 1; blockIdx.x++)
      for (threadIdx.x = 0; threadIdx.x < 256; threadIdx.x++) q6ka_relay(r, nblk);
    for (int u = 0; u < 4 * nblk; u++) {
      QW6 a, b; DQ6K da; DQ6KA db;
      a.load(o, u); b.load_a(r, u); da.load(o, u); db.load(r, u);
      for (int i = 0; i < 4; i++) {
        CHECK(a.a[i] == b.a[i] && a.c[i] == b.c[i] && a.hb[i] == b.hb[i], "off %d unit %d word %d: QW6 quants differ", off, u, i);
        CHECK(da.a[i] == db.a[i] && da.c[i] == db.c[i] && da.hb[i] == db.hb[i], "off %d unit %d word %d: DQ6K quants differ", off, u, i);
      }
      CHECK(a.sc == b.sc && a.d == b.d, "off %d unit %d: QW6 sc %08x/%08x d %g/%g", off, u, a.sc, b.sc, a.d, b.d);
      CHECK(da.sc == db.sc && da.d == db.d, "off %d unit %d: DQ6K sc/d differ", off, u);
      for (int i = 0; i < 16; i++) {
        float x[4], y[4]; da.get4(i, x); db.get4(i, y);
        for (int k = 0; k < 4; k++) CHECK(x[k] == y[k], "off %d unit %d: DQ6K get4 differs", off, u);
      }
    }
    for (int bl = 0; bl < nblk; bl++)
      for (int t = 0; t < 8; t++) {
        Part<T_Q6_K> pa; Part<T_Q6_KA> pb;
        pa.load(o + bl * 210, t); pb.load(r + bl * 210, t);
        for (int i = 0; i < 8; i++) {
          float x[4], y[4]; pa.get4(i, x); pb.get4(i, y);
          for (int k = 0; k < 4; k++) CHECK(x[k] == y[k], "off %d block %d part %d elem %d: %g vs %g", off, bl, t, 4 * i + k, x[k], y[k]);
        }
      }
  }
  printf("%s (%d mismatches)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
