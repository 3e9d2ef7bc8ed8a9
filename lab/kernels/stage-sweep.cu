// stage-sweep.cu: the standalone CUDA C++ sweep behind kernels/NOTES.md's
// "GEMV v8" (2026-11-29): integer decode GEMVs whose blocks stage their
// row group in shared memory with cp.async (issued before griddepcontrol.
// wait, in CH commit groups so the block computes on the first columns
// while the rest arrive), against gemvq.cu's register-streaming kernels,
// per 8b decode shape, 32 launches back to back from a CUDA graph with
// programmatic dependent launch, x already quantized. Not part of the
// build; it includes gemvq.cu.
//
//   cd lab/kernels && nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -o /tmp/stage-sweep stage-sweep.cu
//   /tmp/stage-sweep [MODE]     # on the GPU host (built here with nvcc 11.8 or there)
//
// MODE (logs h200-stage-sweep-MODE.txt, run 2026-11-29, fifth session;
// TRACE=1 names each variant before its correctness run):
// parts = split-K whose partials the consumer would sum (kq4p, ks6p;
// "+sum" rows add a sumparts launch per GEMV; for Q6_K "un1" means the
// weight words through ldwords_p, shared-memory loads), and the staged
// Q6_K kernel with those loads ("staged6 LDS");
// soa = Q6_K re-laid so that each 64-element unit's quants are three
// aligned uint4 (q6ka_relay, T_Q6_KA; k6R<R, UN, true> = gemvq_q6ka's
// structure), against gemvq_q6k_1 and gemvq_q6k_s_1, and down with x
// arriving as floats (kdx: gemvq_x first, "+x", or x quantized inside the
// GEMV behind an arrival counter, "inx");
// l2 = soa6 and kR with each block's rows prefetched into L2 (l2rows);
// layer = 32 layers of q/k/v, o, gate/up and down in one graph, against
// read-only kernels over the same bytes, and with a side stream that
// prefetches o's and gate/up's weights into L2 (l2pf);
// x6 = soa6 with x read a quarter at a time (k6X, fewer registers);
// gq = gate/up quantizing down's x itself, one 64-block of outputs per
// block (kgq), against gate/up then gemvq_x;
// prof = one launch each of four kernels, for ncu (h200-ncu-q6ka.txt; PROF=q4,
// not yet run: the Q4_K ones, for the profile kernels/NOTES.md asks for);
// xpre = kR with each unit's x loaded when its weights are (kRX; -xpre.txt);
// ring4 = Q4_K with each thread's next D units in flight through a private
// shared-memory ring (kRing; -ring4.txt); layer with NOPF=1 = the layer
// chain against rdn, read-only launches of 2-16 blocks a multiprocessor
// and 2-8 loads in flight a thread (-layer2.txt);
// warp = kW, warp-owned row groups reduced by shuffles alone, R rows,
// UN units in flight, GPW groups a warp, against the baseline and kR u2;
// unit64 = kU, Q4_K in 64-element units (both halves of a sub-block
// pair under one set of scales), R rows, UN units in flight, quants
// streamed or through L1; wlayer with KU=1: the layer chain with kU;
// with KUT=1 (both modes): kUT, kU with x transposed (xtrans) so that a
// warp's x loads are contiguous, and kUP, kUT on weights whose chunks are
// permuted (q4perm) for contiguous loads too (-kut.txt);
// xt32 = kRT, the 32-element units with x transposed for them (xtrans32);
// q6t = k6RT, the Q6KA kernel with x transposed for its units (xtrans6);
// dchain = the engine's down chain (Q4_K and Q6KA layers, gemvq_x or x held;
// XB = gemvq_x's block size, 256 by default); dchain6 = the same with the
// Q4_K layers by the pair kernel and the Q6KA layers in several geometries
// (KPS=1..3: the Q4_K layers by kPS, K more units a lane staged in shared
// memory before the wait; -dchain6*.txt);
// qkv6 = the q/k/v launch of the layers with a Q6_K v, one mixed launch
// against two and against capped mixed kernels (-qkv6*.txt);
// seventh session (kernels/NOTES.md, GEMV v11): tc = tensor-core dot
// products kTC, with TS=1 kTS on staged weights (SHAPE=k: one shape, for
// ncu; -tc1/-tc2/-ts.txt); cap = register caps on gemvq_fused (-cap.txt);
// p8 = pair-unit geometries (-p8*.txt; ninth session, on o, q/k/v and
// gate+up: kPX / kFX with x made up instead of loaded, kPB with x shared
// through shared memory, kPH with a block's rows split around the wait,
// -p8c..g.txt); sk = down quantizing its own slice of x (kSK2, kSK6; SK1=1:
// kSK; -sk*.txt; ninth session: kSK2P / kSK6P with a warp's x loads issued
// first, kSK6B timing a 6-in-8 Q6_K layout, -sk7/8.txt; tenth: kSK2S /
// kSK6S reading x from shared memory each dot product, -sk9.txt, and
// kSKL2 / kSKL6 on a slice-major re-lay, -sk10.txt);
// ca = persistent blocks streaming row groups through a shared-memory
// ring by cp.async (kCA, kCA6 for Q6KA, gemvq_ca_body / kCA8 with GLU) on
// gate+up, the GLU, the output, q/k/v and o (-ca*.txt); cachain = the ring
// in chains with its neighbours in the step (-cachain*.txt; tenth session,
// kernels/NOTES.md GEMV v14);
// wlayer with XT32=1: the layer chain with kRT and kUT;
// wlayer = the layer chain with kG (gemvq_fused_1's block looping over row
// groups on a grid of b blocks a multiprocessor) for q/k/v and/or gate/up,
// o and down by the step's u2 kernel; KW=1: with kW instead (rejected,
// h200-stage-sweep-kw.txt);
// mlp = 32 layers of gate/up + down as the step launches them (gate/up,
// gemvq_x, down) against kmlp, the three as one persistent launch with
// grid barriers (-mlp.txt: correct, 50.1 µs a layer against 29.2);
// (regs, removed: k6R and kR under __launch_bounds__(256, 3..6), the
// register caps, -regs.txt);
// none = every staged variant (h200-stage-sweep1.txt); quick = the
// baseline, read-only and a few staged ones (-compilers.txt); pf = L2
// prefetch and double buffering (kp4, -pf.txt); kr = rows, units in
// flight and split-K (kR, -kr.txt); k6 = direct Q6_K variants (k6R,
// -k6.txt); ring = Q6_K shared-memory ring (ks6r, -ring.txt); base = the
// baseline and the chosen ones (-base.txt; with ARENA=1 the matrices
// carved from one allocation in layer order, -arena.txt).
#include "../../kernels/gemvq.cu"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <functional>
#include <algorithm>
#include <cuda_runtime.h>
#include <type_traits>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)

// cp_async16 and cp_async_commit are gemvq.cu's; cpwait takes any depth to 7
// (it took 0-3 until the ring4 run, whose D4 and D6 rows therefore waited
// for nothing: the MISMATCH in -ring4.txt).
__device__ __forceinline__ void cpwait(int n) {
  switch (n) {
  case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
  case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
  case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
  case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
  case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
  case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
  case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
  default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

// R rows of rb bytes (rb % 16 == 0) from row0 into sm, CH commit groups by
// 16-byte chunk ranges of each row.
// GLU (W1 != 0): rows 0..R/2 of the group from W at row0, R/2..R from W1.
__device__ __forceinline__ const uint8_t* grow(const uint8_t* W, const uint8_t* W1, long long rb, int row0, int rows, int r, int R) {
  if (W1) return (r < R / 2 ? W : W1) + (long long)min(row0 + (r % (R / 2)), rows - 1) * rb;
  return W + (long long)min(row0 + r, rows - 1) * rb;
}
template <int R, int CH>
__device__ __forceinline__ void stage_rows(const uint8_t* W, const uint8_t* W1, long long rb, int row0, int rows, uint4* sm) {
  const int chunks = (int)(rb >> 4);
#pragma unroll
  for (int c = 0; c < CH; c++) {
    const int a = c * chunks / CH, e = (c + 1) * chunks / CH;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint4* src = reinterpret_cast<const uint4*>(grow(W, W1, rb, row0, rows, r, R));
      for (int i = a + (int)threadIdx.x; i < e; i += blockDim.x) cp_async16(sm + r * chunks + i, src + i);
    }
    cp_async_commit();
  }
}

// ks4: Q4_K, R rows per block staged; threads walk units u = tid, tid+blockDim...
template <int R, int CH>
__global__ void __launch_bounds__(256) ks4(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ, const uint8_t* W1) {
  extern __shared__ uint4 sm[];
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * (W1 ? R / 2 : R);
  stage_rows<R, CH>(W, W1, rb, row0, rows, sm);
  pdl_trigger();
  pdl_wait();
  const int chunks = (int)(rb >> 4), nsb = cols >> 8;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  int s0 = 0;
  const int T = blockDim.x;
#pragma unroll
  for (int c = 0; c < CH; c++) {
    const int e = (c + 1) * chunks / CH;
    const int s1 = c == CH - 1 ? nsb : (16 * e) / 144;
    int u = 8 * s0 + (int)threadIdx.x;
    QXU x;
    if (u < 8 * s1) x.load(XQ, cols, u);
    cpwait(CH - 1 - c);
    __syncthreads();
    for (; u < 8 * s1; u += T) {
      QXU xn;
      if (u + T < 8 * s1) xn.load(XQ, cols, u + T);
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* row = sm + r * chunks + (u >> 3) * 9;
        QW4 w;
        w.h = row[0];
        w.q = row[1 + (u & 7)];
        w.dot(u, x, acc[r][0]);
      }
      x = xn;
    }
    s0 = s1;
  }
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, W1 ? GLU_SWIGLU : GLU_PLAIN, row0, rows, Y);
}

// ldwords_p: common.cuh's ldwords with the word address taken by pointer
// arithmetic (p - (p & 3)) instead of an integer round trip, so the
// compiler keeps knowing a shared-memory pointer is one: LDS instead of
// generic LD (ptxas 11.8 emitted 112 LD and 37 LDS for gemvq_q6k_s_1).
template <int N>
__device__ __forceinline__ void ldwords_p(const uint8_t* p, uint32_t* out) {
  const int mis = (int)((uintptr_t)p & 3);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p - mis);
  const uint32_t s = (uint32_t)mis * 8;
  uint32_t v[N + 1];
#pragma unroll
  for (int i = 0; i < N; i++) v[i] = w[i];
  v[N] = 0;
  if (s) v[N] = w[N];
#pragma unroll
  for (int i = 0; i < N; i++) out[i] = __funnelshift_r(v[i], v[i + 1], s);
}

// QW6::load through ldwords_p (same words, same results).
__device__ __forceinline__ void q6load_p(QW6& q, const uint8_t* row, int u) {
  const uint8_t* b = row + (long long)(u >> 2) * 210;
  const int n = (u >> 1) & 1, h = u & 1;
  ldwords_p<4>(b + 64 * n + 16 * h, q.a);
  ldwords_p<4>(b + 64 * n + 32 + 16 * h, q.c);
  ldwords_p<4>(b + 128 + 32 * n + 16 * h, q.hb);
  uint32_t sw[2];
  ldwords_p<2>(b + 192 + 8 * n, sw);
  q.sc = __byte_perm(sw[0], sw[1], h ? 0x7531 : 0x6420);
  q.d = h2f((uint32_t)b[208] | ((uint32_t)b[209] << 8));
}

// ks6: Q6_K (rb % 16 == 0), the same structure, 4 units per super-block;
// L: the weight words through ldwords_p (shared-memory loads).
template <int R, int CH, bool L = false>
__global__ void __launch_bounds__(256) ks6(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ, const uint8_t* W1) {
  extern __shared__ uint4 sm[];
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * (W1 ? R / 2 : R);
  stage_rows<R, CH>(W, W1, rb, row0, rows, sm);
  pdl_trigger();
  pdl_wait();
  const int chunks = (int)(rb >> 4), nsb = cols >> 8;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  int s0 = 0;
  const int T = blockDim.x;
#pragma unroll
  for (int c = 0; c < CH; c++) {
    const int e = (c + 1) * chunks / CH;
    const int s1 = c == CH - 1 ? nsb : (16 * e) / 210;
    int u = 4 * s0 + (int)threadIdx.x;
    cpwait(CH - 1 - c);
    __syncthreads();
    for (; u < 4 * s1; u += T) {
      QX6 x;
      x.load(XQ, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) {
        QW6 w;
        if (L) q6load_p(w, reinterpret_cast<const uint8_t*>(sm + r * chunks), u);
        else w.load(reinterpret_cast<const uint8_t*>(sm + r * chunks), u);
        q6_dot(w, x, acc[r][0]);
      }
    }
    s0 = s1;
  }
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, W1 ? GLU_SWIGLU : GLU_PLAIN, row0, rows, Y);
}

// kp4: gemvq_fused_1's plain structure (R = 4 rows per block, warps split
// a row's units, the first unit before pdl_wait) with two options:
// DB = 1 loads the next unit's weights before the current one's dot
// products (explicit double buffering); PF = 1 makes the last tail blocks
// of the grid prefetch the first pfb bytes of the next launch's weights
// into L2 (each tail block a slice), PF = 2 the same with evict_last.
template <int DB, int PF>
__global__ void __launch_bounds__(256) kp4(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ,
                                           const uint8_t* next, long long pfb, int tail) {
  constexpr int R = 4;
  __shared__ float red[8 * R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  const int nunits = cols >> 5, step = 32 * nw;
  int u = warp * 32 + lane;
  QW4 w[R];
  if (u < nunits)
#pragma unroll
    for (int r = 0; r < R; r++) w[r].load(rp[r], u);
  if (PF && next && (int)blockIdx.x >= (int)gridDim.x - tail) {
    const long long per = (pfb / tail + 127) & ~127LL;
    const long long a = per * (blockIdx.x - (gridDim.x - tail));
    for (long long o = a + 128LL * threadIdx.x; o < a + per && o < pfb; o += 128LL * blockDim.x) {
      if (PF == 1) asm volatile("prefetch.global.L2 [%0];" ::"l"(next + o));
      else asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(next + o));
    }
  }
  pdl_trigger();
  pdl_wait();
  for (; u < nunits; u += step) {
    QW4 wn[R];
    if (DB && u + step < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) wn[r].load(rp[r], u + step);
    QXU x;
    x.load(XQ, cols, u);
#pragma unroll
    for (int r = 0; r < R; r++) w[r].dot(u, x, acc[r][0]);
    if (DB) {
#pragma unroll
      for (int r = 0; r < R; r++) w[r] = wn[r];
    } else if (u + step < nunits) {
#pragma unroll
      for (int r = 0; r < R; r++) w[r].load(rp[r], u + step);
    }
  }
  gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
}

// kR: gemvq_fused's plain structure with R rows per block and UN units per
// lane loaded before the first dot product (UN = 2: units u and u + step).
// S > 1: split-K, S blocks per row group, each over 1/S of the units; a
// block writes its R partial sums to P, and the last of the S to arrive
// (a counter per group, reset by it) adds the S partials in split order
// (deterministic) and stores Y.
// l2rows: the block's R rows (rb bytes each) asked into L2 by prefetch
// instructions, one 128-byte line a thread at a time (PF variants of kR and
// k6R: the rest of a row streams into L2 while the lane's first units wait
// in registers, so a lane's later units are L2 hits instead of DRAM
// round trips).
template <int R>
__device__ __forceinline__ void l2rows(const uint8_t* const (&rp)[R], long long rb) {
  const int lines = (int)(rb >> 7) + 1;
#pragma unroll
  for (int r = 0; r < R; r++)
    for (int i = (int)threadIdx.x; i < lines; i += blockDim.x)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(rp[r] + min(128LL * i, rb - 1)));
}

template <int R, int UN, int S, int PF = 0>
__global__ void __launch_bounds__(256) kR(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ,
                                          float* P, int* cnt) {
  __shared__ float red[8 * R];
  __shared__ int last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int g = blockIdx.x / S, k = blockIdx.x % S;
  const int row0 = g * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  const int nunits = cols >> 5, step = 32 * nw;
  const int ua = k * nunits / S, ue = (k + 1) * nunits / S;
  int u = ua + warp * 32 + lane;
  QW4 w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < ue)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], u + j * step);
  if (PF) l2rows<R>(rp, rb);
  pdl_trigger();
  pdl_wait();
  for (; u < ue; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < ue) {
        QXU x;
        x.load(XQ, cols, uj);
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].dot(uj, x, acc[r][0]);
        if (uj + UN * step < ue)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], uj + UN * step);
      }
    }
  }
  if (S == 1) {
    gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
    return;
  }
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = warp_sum(acc[r][0]);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; r++) red[warp * R + r] = acc[r][0];
  __syncthreads();
  if (threadIdx.x < R) {
    float v = 0.0f;
    for (int i = 0; i < nw; i++) v += red[i * R + threadIdx.x];
    P[((long long)k * rows + row0 + threadIdx.x)] = v;
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&cnt[g], 1) == S - 1;
  __syncthreads();
  if (last && threadIdx.x < R) {
    __threadfence();
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < S; i++) v += __ldcg(&P[(long long)i * rows + row0 + threadIdx.x]);
    if (row0 + threadIdx.x < rows) Y[row0 + threadIdx.x] = v;
    if (threadIdx.x == 0) cnt[g] = 0;
  }
}


// k6R: gemvq_q6k's direct structure with R rows per block and UN units
// per lane loaded before pdl_wait (UN = 2: units u and u + step), through
// gemvq.cu's gemvq_walk; SOA: the weights re-laid by q6ka_relay (T_Q6_KA,
// common.cuh; kind 10, "soa6"), which makes it gemvq_q6ka_body for one
// vector.
struct QW6P : QW6 {  // a plain Q6_K unit with gemvq_walk's interface
  __device__ __forceinline__ void dot(int, const QX6& x, float& acc) const { q6_dot(*this, x, acc); }
};
template <int R, int UN, bool SOA = false, int PF = 0>
__global__ void __launch_bounds__(256) k6R(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  if (PF) l2rows<R>(rp, rb);
  if (SOA) gemvq_walk<QW6A, QX6, 1, R, UN>(rp, cols >> 6, cols, XQ, acc);
  else gemvq_walk<QW6P, QX6, 1, R, UN>(rp, cols >> 6, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// k6X: k6R<R, UN, true>'s work (Q6KA rows) with x read a quarter at a
// time inside the rows loop (2 uint4 live instead of QX6's 8 plus the
// scales), so that fewer registers hold x and more warps fit a
// multiprocessor.
template <int R, int UN>
__global__ void __launch_bounds__(256) k6X(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0.0f;
  const int nunits = cols >> 6, step = blockDim.x;
  int u = (int)threadIdx.x;
  QW6 w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load_a(rp[r], u + j * step);
  pdl_trigger();
  pdl_wait();
  for (; u < nunits; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < nunits) {
        const int sb = uj >> 2, n = (uj >> 1) & 1, h = uj & 1;
        const int c0 = 256 * sb + 128 * n + 16 * h;
        const uint8_t* hdr = XQ + 2LL * cols + 32 * (4 * sb + 2 * n);
        float f0[R], f1[R];
#pragma unroll
        for (int r = 0; r < R; r++) f0[r] = f1[r] = 0.0f;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
          const uint4 xh = __ldg(reinterpret_cast<const uint4*>(XQ + c0 + 32 * qq));
          const uint4 xl = __ldg(reinterpret_cast<const uint4*>(XQ + cols + c0 + 32 * qq));
          const int sq = __ldg(reinterpret_cast<const int*>(hdr + (qq < 2 ? 16 : 48) + 8 * h + 4 * (qq & 1)));
#pragma unroll
          for (int r = 0; r < R; r++) {
            const QW6& ww = w[j][r];
            uint32_t q[4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
              const uint32_t lo = (qq & 1) ? ww.c[jj] : ww.a[jj];
              q[jj] = ((lo >> (4 * (qq >> 1))) & 0x0F0F0F0Fu) | (((ww.hb[jj] >> (2 * qq)) & 0x03030303u) << 4);
            }
            int hsum = 0;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) hsum = dp4a_us(q[jj], qword(xh, jj), hsum);
            int i = (int)((uint32_t)hsum << 8) - 32 * sq;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) i = dp4a_uu(q[jj], qword(xl, jj), i);
            const float scf = (float)(int8_t)((ww.sc >> (8 * qq)) & 0xff);
            if (qq < 2) f0[r] = fmaf(scf, (float)i, f0[r]);
            else f1[r] = fmaf(scf, (float)i, f1[r]);
          }
        }
        const float sx0 = __ldg(reinterpret_cast<const float*>(hdr)), sx1 = __ldg(reinterpret_cast<const float*>(hdr + 32));
#pragma unroll
        for (int r = 0; r < R; r++) {
          acc[r] = fmaf(w[j][r].d * sx0, f0[r], acc[r]);
          acc[r] = fmaf(w[j][r].d * sx1, f1[r], acc[r]);
        }
        if (uj + UN * step < nunits)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load_a(rp[r], uj + UN * step);
      }
    }
  }
  float a2[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) a2[r][0] = acc[r];
  gemv_rows_store<R, 1>(a2, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// kgq: gate/up (Q4_K, GLU) with down's x quantized by the launch itself:
// a block owns one 64-block of outputs (64 / OPW warps, each OPW outputs
// in OPW / 2 row groups of 2 gate and 2 up rows, a warp's lanes over a
// row's units, UN in flight), gathers them in shared memory and one warp
// quantizes them (quant64, put64) into XQ2, as gemvq_x would have in a
// launch of its own; Y gets the float outputs too (to check them).
template <int OPW, int UN>
__global__ void __launch_bounds__(64 / OPW * 32) kgq(const uint8_t* Wg, const uint8_t* Wu, long long rb, float* Y, int rows, int cols,
                                                     const uint8_t* XQ, uint8_t* XQ2) {
  __shared__ float hs[64];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nunits = cols >> 5;
#pragma unroll 1
  for (int gi = 0; gi < OPW / 2; gi++) {
    const int o = (int)blockIdx.x * 64 + warp * OPW + 2 * gi;
    const uint8_t* rp[4] = {Wg + (long long)min(o, rows - 1) * rb, Wg + (long long)min(o + 1, rows - 1) * rb,
                            Wu + (long long)min(o, rows - 1) * rb, Wu + (long long)min(o + 1, rows - 1) * rb};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int u = lane;
    QW4 w[UN][4];
#pragma unroll
    for (int j = 0; j < UN; j++)
      if (u + 32 * j < nunits)
#pragma unroll
        for (int r = 0; r < 4; r++) w[j][r].load(rp[r], u + 32 * j);
    if (gi == 0) {
      pdl_trigger();
      pdl_wait();
    }
    for (; u < nunits; u += 32 * UN) {
#pragma unroll
      for (int j = 0; j < UN; j++) {
        const int uj = u + 32 * j;
        if (uj < nunits) {
          QXU x;
          x.load(XQ, cols, uj);
#pragma unroll
          for (int r = 0; r < 4; r++) w[j][r].dot(uj, x, acc[r]);
          if (uj + 32 * UN < nunits)
#pragma unroll
            for (int r = 0; r < 4; r++) w[j][r].load(rp[r], uj + 32 * UN);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
      hs[warp * OPW + 2 * gi] = glu_act(GLU_SWIGLU, acc[0], acc[2]);
      hs[warp * OPW + 2 * gi + 1] = glu_act(GLU_SWIGLU, acc[1], acc[3]);
    }
  }
  __syncthreads();
  if (warp == 0) {
    const float2 v = make_float2(hs[2 * lane], hs[2 * lane + 1]);
    int q0, q1, sum;
    float sx;
    quant64(v, q0, q1, sx, sum);
    put64(XQ2, rows, blockIdx.x, lane, q0, q1, sx, sum);
    const int c = (int)blockIdx.x * 64 + 2 * lane;
    if (c + 1 < rows) *reinterpret_cast<float2*>(Y + c) = v;
  }
}

// ks6r: Q6_K, R rows per block streamed through a ring of NS shared-memory
// stages of C super-blocks per row (C % 8 == 0: 16-byte aligned chunks);
// the chunks of the first NS-1 stages are issued before pdl_wait.
template <int R, int NS>
__global__ void __launch_bounds__(256) ks6r(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ, int C) {
  extern __shared__ uint4 ring[];
  const int T = blockDim.x, row0 = blockIdx.x * R;
  const int nsb = cols >> 8, nch = nsb / C, cb = C * 210 / 16;  // 16-byte chunks per row per stage
  auto issue = [&](int c) {
    if (c < nch) {
      uint4* st = ring + (c % NS) * R * cb;
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* src = reinterpret_cast<const uint4*>(W + (long long)min(row0 + r, rows - 1) * rb + 210LL * C * c);
        for (int i = (int)threadIdx.x; i < cb; i += T) cp_async16(st + r * cb + i, src + i);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int c = 0; c < NS - 1; c++) issue(c);
  pdl_trigger();
  pdl_wait();
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  for (int c = 0; c < nch; c++) {
    issue(c + NS - 1);
    cpwait(NS - 1);
    __syncthreads();
    const uint4* st = ring + (c % NS) * R * cb;
    for (int uu = (int)threadIdx.x; uu < 4 * C; uu += T) {
      const int u = 4 * C * c + uu;
      QX6 x;
      x.load(XQ, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) {
        QW6 w;
        w.load(reinterpret_cast<const uint8_t*>(st + r * cb), uu);
        q6_dot(w, x, acc[r][0]);
      }
    }
    __syncthreads();
  }
  __shared__ float red[8 * R];
  gemv_rows_store<R, 1>(acc, red, T >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// Split-K with the partials left to the consumer (the residual add that
// follows down in the step would sum them): S blocks per row group, block
// k = blockIdx.x % S over the k-th of S column slices, writing its rows'
// sums to P[k*rows + row]; no atomics, no clusters. kq4p: Q4_K, direct,
// UN units per lane before pdl_wait; ks6p: Q6_K staged (one commit group;
// slices of a multiple of 8 super-blocks, so they start 16-byte aligned).
template <int R, int UN>
__global__ void __launch_bounds__(256) kq4p(const uint8_t* W, long long rb, float* P, int rows, int cols, const uint8_t* XQ, int S) {
  __shared__ float red[8 * R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, step = blockDim.x;
  const int k = blockIdx.x % S, row0 = (blockIdx.x / S) * R;
  const int nunits = cols >> 5, ua = k * nunits / S, ue = (k + 1) * nunits / S;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  int u = ua + warp * 32 + lane;
  QW4 w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < ue)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], u + j * step);
  pdl_trigger();
  pdl_wait();
  for (; u < ue; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < ue) {
        QXU x;
        x.load(XQ, cols, uj);
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].dot(uj, x, acc[r][0]);
        if (uj + UN * step < ue)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], uj + UN * step);
      }
    }
  }
  gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, P + (long long)k * rows);
}

template <int R, bool L = false>
__global__ void __launch_bounds__(256) ks6p(const uint8_t* W, long long rb, float* P, int rows, int cols, const uint8_t* XQ, int S) {
  extern __shared__ uint4 q6p[];
  __shared__ float red[8 * R];
  const int T = blockDim.x, k = blockIdx.x % S, row0 = (blockIdx.x / S) * R;
  const int nsb = cols >> 8, sa = k * nsb / S, se = (k + 1) * nsb / S;
  const int chunks = (se - sa) * 210 / 16;
#pragma unroll
  for (int r = 0; r < R; r++) {
    const uint4* src = reinterpret_cast<const uint4*>(W + (long long)min(row0 + r, rows - 1) * rb + 210LL * sa);
    for (int i = (int)threadIdx.x; i < chunks; i += T) cp_async16(q6p + r * chunks + i, src + i);
  }
  cp_async_commit();
  pdl_trigger();
  pdl_wait();
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  cpwait(0);
  __syncthreads();
  for (int u = 4 * sa + (int)threadIdx.x; u < 4 * se; u += T) {
    QX6 x;
    x.load(XQ, cols, u);
#pragma unroll
    for (int r = 0; r < R; r++) {
      QW6 w;
      if (L) q6load_p(w, reinterpret_cast<const uint8_t*>(q6p + r * chunks), u - 4 * sa);
      else w.load(reinterpret_cast<const uint8_t*>(q6p + r * chunks), u - 4 * sa);
      q6_dot(w, x, acc[r][0]);
    }
  }
  gemv_rows_store<R, 1>(acc, red, T >> 5, R, GLU_PLAIN, row0, rows, P + (long long)k * rows);
}

// kdx: down's shape with x arriving as floats (the GLU's output). QX =
// false: gemvq_x quantizes x in a launch of its own first (the step's way
// today). QX = true: the GEMV quantizes x itself: after pdl_wait, warp w of
// block b < nq = ceil(nblk / warps) quantizes 64-block b * warps + w into
// XQ, the block fences and counts its arrival at flag, and every block
// waits (thread 0 spinning on an acquire load) for nq arrivals before its
// first x load. The weights' first UN units are in flight before all of
// it. Blocks are dispatched in index order, so the nq counting blocks run
// before any other block waits. x through plain loads in both (XQ is
// written in the launch, so not through the read-only path); flag zeroed
// before the chain. SOA: Q6KA (w6s), else Q4_K.
struct QXUp : QXU {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int sb = u >> 3, c = u & 7, j = c >> 1, half = c & 1;
    const int a0 = 256 * sb + 64 * j + 16 * half;
    xh0 = *reinterpret_cast<const uint4*>(base + a0);
    xh1 = *reinterpret_cast<const uint4*>(base + a0 + 32);
    xl0 = *reinterpret_cast<const uint4*>(base + cols + a0);
    xl1 = *reinterpret_cast<const uint4*>(base + cols + a0 + 32);
    const uint8_t* hdr = base + 2LL * cols + 32 * (4 * sb + j);
    sx = *reinterpret_cast<const float*>(hdr);
    const int2 t = *reinterpret_cast<const int2*>(hdr + 16 + 8 * half);
    s0 = t.x;
    s1 = t.y;
  }
};
struct QX6p : QX6 {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int sb = u >> 2, n = (u >> 1) & 1, h = u & 1;
    const int c0 = 256 * sb + 128 * n + 16 * h;
#pragma unroll
    for (int qq = 0; qq < 4; qq++) {
      xh[qq] = *reinterpret_cast<const uint4*>(base + c0 + 32 * qq);
      xl[qq] = *reinterpret_cast<const uint4*>(base + cols + c0 + 32 * qq);
    }
    const uint8_t* hdr = base + 2LL * cols + 32 * (4 * sb + 2 * n);
    sx0 = *reinterpret_cast<const float*>(hdr);
    sx1 = *reinterpret_cast<const float*>(hdr + 32);
    s01 = *reinterpret_cast<const int2*>(hdr + 16 + 8 * h);
    s23 = *reinterpret_cast<const int2*>(hdr + 48 + 8 * h);
  }
};
struct QW4x : QW4 {
  __device__ __forceinline__ void dot(int u, const QXUp& x, float& acc) const { QW4::dot(u, x, acc); }
};
struct QW6Ax : QW6A {
  __device__ __forceinline__ void dot(int, const QX6p& x, float& acc) const { q6_dot(*this, x, acc); }
};
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
template <int R, int UN, bool SOA, bool QX>
__global__ void __launch_bounds__(256) kdx(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X,
                                           uint8_t* XQ, int* flag) {
  using WT = typename std::conditional<SOA, QW6Ax, QW4x>::type;
  using XT = typename std::conditional<SOA, QX6p, QXUp>::type;
  __shared__ float red[8 * R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, step = blockDim.x;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  const int nunits = SOA ? cols >> 6 : cols >> 5;
  int u = (int)threadIdx.x;
  WT w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], u + j * step);
  pdl_trigger();
  pdl_wait();
  if (QX) {
    const int nblk = cols >> 6, nq = (nblk + nw - 1) / nw;
    if ((int)blockIdx.x < nq) {
      const int g = (int)blockIdx.x * nw + warp;
      if (g < nblk) {
        const float2 v = *reinterpret_cast<const float2*>(X + 64 * g + 2 * lane);
        int q0, q1, sum;
        float sx;
        quant64(v, q0, q1, sx, sum);
        put64(XQ, cols, g, lane, q0, q1, sx, sum);
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(flag, 1);
    }
    if (threadIdx.x == 0)
      while (ld_acquire(flag) < nq) __nanosleep(32);
    __syncthreads();
  }
  for (; u < nunits; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < nunits) {
        XT x;
        x.load(XQ, cols, uj);
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].dot(uj, x, acc[r][0]);
        if (uj + UN * step < nunits)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], uj + UN * step);
      }
    }
  }
  gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
}

// kmlp: a layer's MLP (gate/up, down's x, down; Q4_K) as one persistent
// launch of 2 blocks a multiprocessor instead of three launches. Phase A:
// warp w takes outputs w, w + NW, ... of gate/up (its lanes over a row's
// units, all four units of both rows loaded at once) and writes
// act(gate) * up to H. Grid barrier (arrival counter bar[0], each block's
// thread 0 after a fence; every block spins until all arrived), then warps
// 0..223 quantize H's 64-blocks into XQ2 (quant64, put64), barrier bar[1],
// then phase C: warp w takes down's rows w, w + NW, ..., its lanes over a
// row's units with UN in flight along the whole run of its rows; the first
// UN loads of phase C are issued before the barriers (weights are no
// phase's output). bar is zeroed before the chain.
__device__ __forceinline__ void grid_barrier(int* bar) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(bar, 1);
    while (ld_acquire(bar) < (int)gridDim.x) __nanosleep(20);
  }
  __syncthreads();
}
template <int UN>
__global__ void __launch_bounds__(256, 2) kmlp(const uint8_t* Wg, const uint8_t* Wu, long long rbg, int hid, int dim,
                                                const uint8_t* XQ, float* H, uint8_t* XQ2, const uint8_t* Wd, long long rbd,
                                                float* Y, int* bar) {
  const int lane = threadIdx.x & 31;
  const int gw = (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)), NW = (int)(gridDim.x * (blockDim.x >> 5));
  const int nua = dim >> 5;    // gate/up units per row (128 at 4096)
  const int nuc = hid >> 5;    // down units per row (448 at 14336)
  const int upl = nuc >> 5;    // down units per lane per row (nuc % 32 == 0)
  const int nrc = gw < dim ? (dim - 1 - gw) / NW + 1 : 0;  // down rows of this warp
  const int nf = nrc * upl;    // its (row, unit) steps
  // phase C's first UN steps, before anything waits
  QW4 wc[UN];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (j < nf) wc[j].load(Wd + (long long)(gw + (j / upl) * NW) * rbd, lane + 32 * (j % upl));
  pdl_trigger();
  pdl_wait();
  // phase A
  for (int o = gw; o < hid; o += NW) {
    const uint8_t* g = Wg + (long long)o * rbg;
    const uint8_t* u = Wu + (long long)o * rbg;
    QW4 a[4], b[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (lane + 32 * j < nua) { a[j].load(g, lane + 32 * j); b[j].load(u, lane + 32 * j); }
    float ag = 0.0f, au = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (lane + 32 * j < nua) {
        QXU x;
        x.load(XQ, dim, lane + 32 * j);
        a[j].dot(lane + 32 * j, x, ag);
        b[j].dot(lane + 32 * j, x, au);
      }
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (lane == 0) H[o] = glu_act(GLU_SWIGLU, ag, au);
  }
  grid_barrier(bar);
  for (int blk = gw; blk < (hid >> 6); blk += NW) {
    const float2 v = *reinterpret_cast<const float2*>(H + 64 * blk + 2 * lane);
    int q0, q1, sum;
    float sx;
    quant64(v, q0, q1, sx, sum);
    put64(XQ2, hid, blk, lane, q0, q1, sx, sum);
  }
  grid_barrier(bar + 1);
  // phase C: steps f = 0..nf-1, row gw + (f / upl) * NW, unit lane + 32 * (f % upl)
  float acc = 0.0f;
  for (int f = 0; f < nf; f += UN) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int fj = f + j;
      if (fj < nf) {
        const int uu = lane + 32 * (fj % upl);
        QXUp x;
        x.load(XQ2, hid, uu);
        wc[j].dot(uu, x, acc);
        const int fn = fj + UN;
        if (fn < nf) wc[j].load(Wd + (long long)(gw + (fn / upl) * NW) * rbd, lane + 32 * (fn % upl));
        if (fj % upl == upl - 1) {  // the row's last step
          const float t = warp_sum(acc);
          if (lane == 0) Y[gw + (fj / upl) * NW] = t;
          acc = 0.0f;
        }
      }
    }
  }
}

// The consumer's extra work, timed as a launch of its own in the "+sum"
// rows: y = sum over the S partials in split order (the step would do it
// inside the residual add it already launches).
__global__ void __launch_bounds__(256) sumparts(const float* P, float* Y, int rows, int S) {
  PDL_ENTRY();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  float v = 0.0f;
  for (int k = 0; k < S; k++) v += P[(long long)k * rows + i];
  Y[i] = v;
}

// l2pf: a side-stream kernel that asks L2 for the first na bytes of a and
// the first nb bytes of each of b0 and b1, one 128-byte line per
// instruction (EL: with the evict_last priority), so that a later GEMV of
// the layer finds them there (mode layer).
template <int EL>
__global__ void l2pf(const uint8_t* a, long long na, const uint8_t* b0, const uint8_t* b1, long long nb) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, st = (long long)gridDim.x * blockDim.x;
  const long long la = na >> 7, lb = nb >> 7;
  for (long long i = t; i < la + 2 * lb; i += st) {
    const uint8_t* p = i < la ? a + 128 * i : (i < la + lb ? b0 + 128 * (i - la) : b1 + 128 * (i - la - lb));
    if (EL) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p));
    else asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  }
}

// Read-only ceiling: persistent, 4 uint4 loads in flight per thread, first before the wait.
__global__ void __launch_bounds__(256) rd(const uint4* p, long long n, unsigned* out) {
  uint32_t a = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i + 3 * stride < n) {
    uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride), v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
    pdl_trigger(); pdl_wait();
    a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
    i += 4 * stride;
  } else {
    pdl_trigger(); pdl_wait();
  }
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride), v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
    a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) { uint4 v = ld_stream(p + i); a ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (a == 0x12345678u) out[0] = a;
}

// rdn: read-only over one or two ranges in one launch (gate and up as
// the GLU kernel reads them), NL loads in flight a thread, rolling, the
// first NL before the wait; the layer mode's ceiling variants.
template <int NL>
__global__ void __launch_bounds__(256) rdn(const uint4* p0, long long n0, const uint4* p1, long long n1, unsigned* out) {
  const long long n = n0 + n1, stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  auto at = [&](long long j) -> const uint4* { return j < n0 ? p0 + j : p1 + (j - n0); };
  uint32_t acc = 0;
  uint4 v[NL];
#pragma unroll
  for (int k = 0; k < NL; k++)
    if (i + k * stride < n) v[k] = ld_stream(at(i + k * stride));
  pdl_trigger();
  pdl_wait();
  for (; i < n; i += NL * stride) {
#pragma unroll
    for (int k = 0; k < NL; k++) {
      const long long j = i + k * stride;
      if (j < n) {
        acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        if (j + NL * stride < n) v[k] = ld_stream(at(j + NL * stride));
      }
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// kRing: gemvq_fused_1's plain structure (Q4_K, R rows a block, warps
// over a row's units) with each thread's next D units of weights in
// flight through a private ring of D + 1 shared-memory slots (cp.async,
// 16 bytes of header and 16 of quants per row and unit; the slot a unit
// is copied into is the one consumed an iteration before, so no copy
// lands on data still being read), not in registers: the bytes in flight
// a multiprocessor holds are then bounded by shared memory (228 KB), not
// by the register file, which the read-only chains (mode layer, rdn)
// showed is what the GEMVs lack. Dynamic shared memory: (D + 1) * R * 2
// uint4 a thread.
template <int R, int D>
__global__ void __launch_bounds__(256) kRing(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  extern __shared__ uint4 ring[];
  __shared__ float red[8 * R];
  const int T = blockDim.x, nw = T >> 5;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  const int nunits = cols >> 5;
  const int u0 = (int)threadIdx.x;
  auto slot = [&](int d, int r, int half) { return ring + (((d * R + r) * 2 + half) * T + threadIdx.x); };
  auto issue = [&](int d, int uu) {
    if (uu < nunits) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint8_t* b = rp[r] + (long long)(uu >> 3) * 144;
        cp_async16(slot(d, r, 0), reinterpret_cast<const uint4*>(b));
        cp_async16(slot(d, r, 1), reinterpret_cast<const uint4*>(b + 16 + 16 * (uu & 7)));
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int d = 0; d < D; d++) issue(d, u0 + d * T);
  pdl_trigger();
  pdl_wait();
  for (int k = 0; u0 + k * T < nunits; k++) {
    const int uu = u0 + k * T, d = k % (D + 1);
    issue((k + D) % (D + 1), uu + D * T);
    cpwait(D);  // every group but the D newest: unit k's has landed
    QW4 w[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
      w[r].h = *slot(d, r, 0);
      w[r].q = *slot(d, r, 1);
    }
    QXU x;
    x.load(XQ, cols, uu);
#pragma unroll
    for (int r = 0; r < R; r++) w[r].dot(uu, x, acc[r][0]);
  }
  cpwait(0);
  gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
}

// kW: each warp owns its own group of R rows (GLU: R/2 gate and the same
// R/2 up rows) and walks all their units itself, lane l taking units l,
// l + 32, ..., UN in flight; the sums are reduced by shuffles alone (no
// shared memory, no block barrier) and lane r stores row r. A warp takes
// groups g, g + (warps in the grid), ... (GPW groups a warp where the grid
// is sized so), the next group's first UN units loaded before the current
// one's reduction. Why: in gemvq_fused_1 on 4096 columns a lane does two
// unit iterations between a ~100-instruction prologue and a block-wide
// reduction (ncu, h200-ncu-q4k.txt: ~3 instructions a weight against the
// loop's 2.2, issue-bound at base clock: the kernel's time scales with
// the SM clock).
template <int R, int UN, bool GLU>
__global__ void __launch_bounds__(256) kW(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                          const uint8_t* XQ) {
  const int lane = threadIdx.x & 31, nwb = blockDim.x >> 5;
  constexpr int per = GLU ? R / 2 : R;
  const int ngroups = (rows + per - 1) / per;
  const int stride = gridDim.x * nwb;
  int g = blockIdx.x * nwb + (threadIdx.x >> 5);
  const int nunits = cols >> 5;
  const uint8_t* rp[R];
  {
    const int gg = min(g, ngroups - 1);
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = grow(W, GLU ? W1 : nullptr, rb, gg * per, rows, r, R);
  }
  QW4 w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (lane + 32 * j < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], lane + 32 * j);
  pdl_trigger();
  pdl_wait();
  do {
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int u = lane; u < nunits; u += 32 * UN) {
#pragma unroll
      for (int j = 0; j < UN; j++) {
        const int uj = u + 32 * j;
        if (uj < nunits) {
          QXU x;
          x.load(XQ, cols, uj);
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].dot(uj, x, acc[r]);
          if (uj + 32 * UN < nunits)
#pragma unroll
            for (int r = 0; r < R; r++) w[j][r].load(rp[r], uj + 32 * UN);
        }
      }
    }
    const int gn = g + stride, row0 = g * per;
    if (gn < ngroups) {
#pragma unroll
      for (int r = 0; r < R; r++) rp[r] = grow(W, GLU ? W1 : nullptr, rb, gn * per, rows, r, R);
#pragma unroll
      for (int j = 0; j < UN; j++)
        if (lane + 32 * j < nunits)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], lane + 32 * j);
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
    if (g < ngroups) {
#pragma unroll
      for (int r = 0; r < per; r++) {
        if (lane == r && row0 + r < rows) {
          if constexpr (GLU) Y[row0 + r] = glu_act(GLU_SWIGLU, acc[r], acc[r + per]);
          else Y[row0 + r] = acc[r];
        }
      }
    }
    g = gn;
  } while (g < ngroups);
}

// kG: gemvq_fused_1's block (R rows, the block's warps splitting each
// row's units, one unit a lane in flight, reduced through shared memory)
// on a grid of a few blocks a multiprocessor that loop over the row groups
// (g = blockIdx.x, + gridDim.x, ...), the next group's first units loaded
// before the current one's reduction. Why: a launch that leaves registers
// free lets the next launch's blocks become resident under programmatic
// dependent launch while it runs, and load their weights then (o's u2
// kernel has all of o in flight before its wait) instead of after this
// launch's last block retires.
template <int R, bool GLU>
__global__ void __launch_bounds__(256) kG(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                          const uint8_t* XQ) {
  __shared__ float red[8 * R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  constexpr int per = GLU ? R / 2 : R;
  const int ngroups = (rows + per - 1) / per;
  const int nunits = cols >> 5, step = 32 * nw;
  int g = blockIdx.x;
  const uint8_t* rp[R];
  {
    const int gg = min(g, ngroups - 1);
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = grow(W, GLU ? W1 : nullptr, rb, gg * per, rows, r, R);
  }
  const int u0 = warp * 32 + lane;
  QW4 w[R];
  if (u0 < nunits)
#pragma unroll
    for (int r = 0; r < R; r++) w[r].load(rp[r], u0);
  pdl_trigger();
  pdl_wait();
  while (g < ngroups) {
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int u = u0; u < nunits; u += step) {
      QXU x;
      x.load(XQ, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) w[r].dot(u, x, acc[r]);
      if (u + step < nunits)
#pragma unroll
        for (int r = 0; r < R; r++) w[r].load(rp[r], u + step);
    }
    const int gn = g + gridDim.x, row0 = g * per;
    if (gn < ngroups) {
#pragma unroll
      for (int r = 0; r < R; r++) rp[r] = grow(W, GLU ? W1 : nullptr, rb, gn * per, rows, r, R);
      if (u0 < nunits)
#pragma unroll
        for (int r = 0; r < R; r++) w[r].load(rp[r], u0);
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; r++) red[warp * R + r] = acc[r];
    __syncthreads();
    if (threadIdx.x < per) {
      float a = 0.0f, b = 0.0f;
      for (int i = 0; i < nw; i++) {
        a += red[i * R + threadIdx.x];
        if (GLU) b += red[i * R + per + threadIdx.x];
      }
      if (row0 + (int)threadIdx.x < rows) {
        if constexpr (GLU) Y[row0 + threadIdx.x] = glu_act(GLU_SWIGLU, a, b);
        else Y[row0 + threadIdx.x] = a;
      }
    }
    __syncthreads();
    g = gn;
  }
}

// kU: Q4_K in 64-element units: unit v is sub-blocks 2j and 2j+1 of
// super-block v >> 2 (j = v & 3), i.e. the 32 quant bytes of chunk j, so
// both of its 16-byte halves share one scale, one min, d and dmin and
// one 64-block of x. The integer dot products of both halves are summed
// before the scales (t = sc0*i0 + sc1*(i1>>4) < 2^31 still: 32 elements
// of |x_int| <= 32767, nibbles <= 15, scales <= 63), so the scale
// decoding and the float update happen once per 64 weights instead of
// once per 32, and a lane holds 12 registers of weights per 32 quant
// bytes instead of 16. Why: the Q4_K GEMVs are partly issue-bound
// (h200-ncu-q4k-stalls.txt: ~2.9 instructions a weight; cold gate/up
// 25.1 us at 1.44 GHz against 21.9 at 1.95) and register-bound in
// weights in flight. L1: the quant bytes through L1 (each warp-wide
// 16-byte load uses half of every sector it touches; the other half
// comes with the unit's second load) instead of ld_stream.
struct SQXP : QXP {  // gemvq.cu's pair-unit x, read from L0 instead of LP
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int v) {
    const int a0 = 256 * (v >> 2) + 64 * (v & 3);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      h[i] = __ldg(reinterpret_cast<const uint4*>(base + a0 + 16 * i));
      l[i] = __ldg(reinterpret_cast<const uint4*>(base + cols + a0 + 16 * i));
    }
    const uint8_t* hdr = base + 2LL * cols + 32 * v;
    sx = __ldg(reinterpret_cast<const float*>(hdr));
    const int4 g = __ldg(reinterpret_cast<const int4*>(hdr + 16));
    S0 = g.x + g.z;
    S1 = g.y + g.w;
  }
};
// PERM: the super-block's 8 quant chunks stored in the order 0, 2, 4, 6,
// 1, 3, 5, 7 (q4perm), so that a warp's first loads (chunk 2j of each
// lane's unit) read 64 contiguous bytes of each super-block and its second
// loads the other 64, instead of 16 bytes of every 32.
template <bool L1, bool PERM = false>
struct SQW4P : QW4P {  // gemvq.cu's pair unit (its dot), loaded through L1 or permuted
  __device__ __forceinline__ void load(const uint8_t* row, int v) {
    const uint8_t* b = row + (long long)(v >> 2) * 144;
    h = __ldg(reinterpret_cast<const uint4*>(b));
    const uint8_t* q = b + 16 + 32 * (v & 3);
    if (PERM) {
      q0 = ld_stream(b + 16 + 16 * (v & 3));
      q1 = ld_stream(b + 80 + 16 * (v & 3));
    } else if (L1) {
      q0 = __ldg(reinterpret_cast<const uint4*>(q));
      q1 = __ldg(reinterpret_cast<const uint4*>(q + 16));
    } else {
      q0 = ld_stream(q);
      q1 = ld_stream(q + 16);
    }
  }
};

// kwalk: R rows a block (GLU: R/2 of gate and the same of up), its warps
// splitting each row's units of E elements (unit W, x side X), through
// gemvq.cu's gemvq_walk (UN units a lane in flight, the first before the
// wait) and gemv_rows_store: the body of kU, kUT and kRT, which differ in
// their units and in where x comes from.
template <typename Wt, typename X, int E, int R, int UN, bool GLU>
__device__ __forceinline__ void kwalk(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                      const uint8_t* XQ) {
  __shared__ float red[8 * R];
  constexpr int per = GLU ? R / 2 : R;
  const int row0 = blockIdx.x * per;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = grow(W, GLU ? W1 : nullptr, rb, row0, rows, r, R);
  float acc[R][1];
  zero_acc(acc);
  gemvq_walk<Wt, X, 1, R, UN>(rp, cols / E, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU ? GLU_SWIGLU : GLU_PLAIN, row0, rows, Y);
}

template <int R, int UN, bool L1, bool GLU>
__global__ void __launch_bounds__(256) kU(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                          const uint8_t* XQ) {
  kwalk<SQW4P<L1>, SQXP, 64, R, UN, GLU>(W, W1, rb, Y, rows, cols, XQ);
}

// kU's x transposed (XT mode): part i (xh 0..3, xl 4..7, 16 bytes) of
// unit v at XT + 16 * (i * nv + v), the scale at XF[v], the two group sums
// at XG[v]: a warp's load of one part reads 512 contiguous bytes where
// SQXP's lanes read 16 of every 64 (each sector a quarter used).
struct QXPT : SQXP {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int v) {
    const int nv = cols >> 6;
    gemvq_ld_pieces(base, nv, v, h, l);
    const float* xf = reinterpret_cast<const float*>(base + 128LL * nv);
    sx = __ldg(xf + v);
    const int2 g = __ldg(reinterpret_cast<const int2*>(base + 132LL * nv) + v);
    S0 = g.x;
    S1 = g.y;
  }
};
__global__ void q4perm(uint8_t* p, long long nblocks) {
  const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nblocks) return;
  uint4* c = reinterpret_cast<uint4*>(p + 144 * b + 16);
  uint4 t[8];
#pragma unroll
  for (int i = 0; i < 8; i++) t[i] = c[i];
#pragma unroll
  for (int i = 0; i < 8; i++) c[(i & 1) * 4 + (i >> 1)] = t[i];
}
__global__ void xtrans(const uint8_t* XQ, int cols, uint8_t* XT) {
  const int nv = cols >> 6;
  const int id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= 9 * nv) return;
  const int i = id / nv, v = id % nv;
  if (i < 8) {
    const int a0 = 256 * (v >> 2) + 64 * (v & 3) + 16 * (i & 3) + (i >= 4 ? cols : 0);
    reinterpret_cast<uint4*>(XT)[i * nv + v] = *reinterpret_cast<const uint4*>(XQ + a0);
  } else {
    SQXP x;
    x.load(XQ, cols, v);
    reinterpret_cast<float*>(XT + 128LL * nv)[v] = x.sx;
    reinterpret_cast<int2*>(XT + 132LL * nv)[v] = make_int2(x.S0, x.S1);
  }
}
template <int R, int UN, bool GLU, bool PERM = false>
__global__ void __launch_bounds__(256) kUT(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                           const uint8_t* XT) {
  kwalk<SQW4P<false, PERM>, QXPT, 64, R, UN, GLU>(W, W1, rb, Y, rows, cols, XT);
}

// kRT: gemvq_fused_1's 32-element units (QW4) with x transposed for them
// (xtrans32): part i (xh0, xh1, xl0, xl1 of QXU) of unit u at XT + 16 *
// (i * nu + u), the 64-block's scale at XF[u], the unit's two group sums
// at XG[u], so a warp's x load reads 512 contiguous bytes (QXU's read 16 of
// every 32 over 1 KB). R rows a block (GLU: R/2 of gate and of up), UN
// units a lane in flight, gemv_rows_store's reduction.
struct QXUT : QXU {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int nu = cols >> 5;
    const uint4* t = reinterpret_cast<const uint4*>(base);
    xh0 = __ldg(t + u);
    xh1 = __ldg(t + nu + u);
    xl0 = __ldg(t + 2 * nu + u);
    xl1 = __ldg(t + 3 * nu + u);
    sx = __ldg(reinterpret_cast<const float*>(base + 64LL * nu) + u);
    const int2 g = __ldg(reinterpret_cast<const int2*>(base + 68LL * nu) + u);
    s0 = g.x;
    s1 = g.y;
  }
};
__global__ void xtrans32(const uint8_t* XQ, int cols, uint8_t* XT) {
  const int nu = cols >> 5;
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= nu) return;
  QXU x;
  x.load(XQ, cols, u);
  uint4* t = reinterpret_cast<uint4*>(XT);
  t[u] = x.xh0;
  t[nu + u] = x.xh1;
  t[2 * nu + u] = x.xl0;
  t[3 * nu + u] = x.xl1;
  reinterpret_cast<float*>(XT + 64LL * nu)[u] = x.sx;
  reinterpret_cast<int2*>(XT + 68LL * nu)[u] = make_int2(x.s0, x.s1);
}
template <int R, int UN, bool GLU>
__global__ void __launch_bounds__(256) kRT(const uint8_t* W, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                           const uint8_t* XT) {
  kwalk<QW4, QXUT, 32, R, UN, GLU>(W, W1, rb, Y, rows, cols, XT);
}

// k6RT: k6R<R, UN, true> (Q6KA rows) with x transposed for the Q6_K
// units (xtrans6): piece p (xh of quarter p, then xl of quarter p - 4) of
// unit u at XT + 16 * (p * nu + u), the two 64-block scales at XF[u]
// (float2), the four quarter sums at XG[u] (int4), so each warp-wide x
// load reads 512 contiguous bytes (QX6's read 32-byte pairs over 2 KB).
struct QX6T : QX6 {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int u) {
    const int nu = cols >> 6;
    gemvq_ld_pieces(base, nu, u, xh, xl);
    const float2 f = __ldg(reinterpret_cast<const float2*>(base + 128LL * nu) + u);
    sx0 = f.x;
    sx1 = f.y;
    const int4 g = __ldg(reinterpret_cast<const int4*>(base + 136LL * nu) + u);
    s01 = make_int2(g.x, g.y);
    s23 = make_int2(g.z, g.w);
  }
};
__global__ void xtrans6(const uint8_t* XQ, int cols, uint8_t* XT) {
  const int nu = cols >> 6;
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= nu) return;
  QX6 x;
  x.load(XQ, cols, u);
  uint4* t = reinterpret_cast<uint4*>(XT);
#pragma unroll
  for (int qq = 0; qq < 4; qq++) {
    t[qq * nu + u] = x.xh[qq];
    t[(4 + qq) * nu + u] = x.xl[qq];
  }
  reinterpret_cast<float2*>(XT + 128LL * nu)[u] = make_float2(x.sx0, x.sx1);
  reinterpret_cast<int4*>(XT + 136LL * nu)[u] = make_int4(x.s01.x, x.s01.y, x.s23.x, x.s23.y);
}
template <int R, int UN>
__global__ void __launch_bounds__(256) k6RT(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XT) {
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  gemvq_walk<QW6A, QX6T, 1, R, UN>(rp, cols >> 6, cols, XT, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// kPS: gemvq_p2u2_1's pair units (gemvq.cu's QW4P on LP) with more of
// each lane's units in flight before pdl_wait than its registers hold:
// units 0..UN-1 of the lane's walk are loaded into registers as in
// gemvq_walk, units UN..UN+K-1 copied by cp.async into the lane's own
// slots of shared memory (48 bytes a row and unit: the super-block header
// and the 32 quant bytes), all before the wait. After it the lane takes
// its units in the walk's order (so the sums are gemvq_walk's, bit for
// bit): the register ones (each slot refilled with the unit UN + K on),
// then the shared-memory ones, then the rest through the registers. Why:
// down waits behind its x launch (h200-stage-sweep-dchain.txt: 1.7 us a
// layer), and a one-wave grid that has most of its weights on chip when
// the wait ends hides that wait; registers alone hold 2 of a lane's 7
// units at 14336 columns.
template <int R, int UN, int K>
__global__ void __launch_bounds__(256) kPS(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  __shared__ float red[8 * R];
  extern __shared__ uint4 ps[];  // [K][R][3][threads] uint4
  const int row0 = blockIdx.x * R, T = blockDim.x;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][1];
  zero_acc(acc);
  const int nv = cols >> 6, step = T, t = threadIdx.x;
  const int v0 = t;
  QW4P w[UN][R];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (v0 + j * step < nv)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], v0 + j * step);
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int v = v0 + (UN + k) * step;
    if (v < nv)
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint8_t* b = rp[r] + (long long)(v >> 2) * 144;
        uint4* d = ps + ((k * R + r) * 3) * T + t;
        cp_async16(d, reinterpret_cast<const uint4*>(b));
        cp_async16(d + T, reinterpret_cast<const uint4*>(b + 16 + 32 * (v & 3)));
        cp_async16(d + 2 * T, reinterpret_cast<const uint4*>(b + 32 + 32 * (v & 3)));
      }
  }
  cp_async_commit();
  pdl_trigger();
  pdl_wait();
  // The register units 0..UN-1, each slot refilled with unit j + UN + K.
#pragma unroll
  for (int j = 0; j < UN; j++) {
    const int v = v0 + j * step;
    if (v < nv) {
      QXP x;
      x.load(XQ, cols, v);
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].dot(v, x, acc[r][0]);
      if (v + (UN + K) * step < nv)
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].load(rp[r], v + (UN + K) * step);
    }
  }
  // The shared-memory units UN..UN+K-1 (each lane reads only its own slots).
  cp_async_wait(0);
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int v = v0 + (UN + k) * step;
    if (v < nv) {
      QXP x;
      x.load(XQ, cols, v);
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* d = ps + ((k * R + r) * 3) * T + t;
        QW4P q;
        q.h = d[0];
        q.q0 = d[T];
        q.q1 = d[2 * T];
        q.dot(v, x, acc[r][0]);
      }
    }
  }
  // The rest through the registers: unit UN + K + i in slot i % UN.
  for (int base = UN + K; v0 + base * step < nv; base += UN) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int v = v0 + (base + j) * step;
      if (v < nv) {
        QXP x;
        x.load(XQ, cols, v);
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].dot(v, x, acc[r][0]);
        if (v + UN * step < nv)
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], v + UN * step);
      }
    }
  }
  gemv_rows_store<R, 1>(acc, red, T >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// kRX: kR (Q4_K, R rows a block, UN units a lane in flight) with each
// unit's x loaded when its weights are, not after they arrive: the x
// side's L1/L2 latency then overlaps the weights' DRAM latency instead of
// following it in every step (the ncu of the Q6KA kernel showed 41% of
// stalls on L1TEX data with 3.5 warps a scheduler).
template <int R, int UN>
__global__ void __launch_bounds__(256) kRX(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  __shared__ float red[8 * R];
  const int nw = blockDim.x >> 5, step = blockDim.x;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r][0] = 0.0f;
  const int nunits = cols >> 5;
  int u = (int)threadIdx.x;
  QW4 w[UN][R];
  QXU x[UN];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[j][r].load(rp[r], u + j * step);
  pdl_trigger();
  pdl_wait();
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (u + j * step < nunits) x[j].load(XQ, cols, u + j * step);
  for (; u < nunits; u += UN * step) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int uj = u + j * step;
      if (uj < nunits) {
#pragma unroll
        for (int r = 0; r < R; r++) w[j][r].dot(uj, x[j], acc[r][0]);
        const int un = uj + UN * step;
        if (un < nunits) {
#pragma unroll
          for (int r = 0; r < R; r++) w[j][r].load(rp[r], un);
          x[j].load(XQ, cols, un);
        }
      }
    }
  }
  gemv_rows_store<R, 1>(acc, red, nw, R, GLU_PLAIN, row0, rows, Y);
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    reinterpret_cast<uint32_t*>(p)[i] = h;
  }
}
// Sets each block's f16 scales to small finite values (Q4_K: d, dmin at 0; Q6_K: d at 208).
__global__ void fixhdr(uint8_t* p, size_t nblocks, int bb, int off, int count) {
  for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += (size_t)gridDim.x * blockDim.x)
    for (int k = 0; k < count; k++) { p[b * bb + off + 2 * k] = 0x00; p[b * bb + off + 2 * k + 1] = 0x14; }
}
__global__ void fillx(float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = (float)(h & 0xffff) / 65536.0f - 0.5f;
  }
}

static int SMS;

template <typename... A>
static void launchS(void (*f)(A...), int grid, int block, int smem, cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(grid); cfg.blockDim = dim3(block); cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, f, args...));
}

struct Mat { int rows, cols; bool q6; uint8_t* w; long long rb; float* y; uint8_t* w1 = nullptr; uint8_t* w6s = nullptr; int* flag = nullptr;
             uint8_t* wp = nullptr; uint8_t* w1p = nullptr; uint8_t* wL = nullptr; };
static float* gXf;      // x as floats (kdx)
static uint8_t* gXQd;   // kdx's quantized x
static int* gFlags;     // kdx's arrival counters, one per matrix
static int gNFlags;
typedef void (*KFn)(const uint8_t*, long long, float*, int, int, const uint8_t*);
typedef void (*KFn6)(const uint8_t*, long long, float*, int, const uint8_t*, long long, float*, int, const uint8_t*, long long,
                     float*, int, int, const uint8_t*);
typedef void (*SFn)(const uint8_t*, long long, float*, int, int, const uint8_t*, const uint8_t*);
static uint8_t* gXQ[2];  // quantized x for 4096 and 14336 columns
static uint8_t* gXT[2];  // the same transposed for kUT (xtrans)
static uint8_t* gXT32[2];  // and for kRT (xtrans32)
static uint8_t* gXT6[2];   // and for k6RT (xtrans6)
static unsigned* gOut;

typedef void (*RFn)(const uint8_t*, long long, float*, int, int, const uint8_t*, float*, int*);
static float* gP; static int* gCnt;
static bool gSoa;  // modes soa and parts: re-laid copies of the Q6_K matrices (kind 10)
// kind 5 = kR (R, CH = UN*10 + S, warps)
typedef void (*PFn)(const uint8_t*, long long, float*, int, int, const uint8_t*, const uint8_t*, long long, int);
// variant: kind 4 = kp4 (R = DB, CH = PF, warps: rule; pf MB, tail blocks)
// kind 0 = baseline (gemvq_fused_1 / gemvq_q6k_1, warps by gemvqGeometry),
// 1 = gemvq_q6k_s_1, 2 = staged (R, CH, warps), 3 = read-only,
// 10 = k6R<R, UN, true> on the re-laid Q6_K copy (R, CH = UN, warps).
struct Var { int kind, R, CH, warps; int pfmb = 0, tail = 0; };

static SFn stagedFn(bool q6, int R, int CH) {
#define SEL(K) \
  if (R == 1 && CH == 1) return K<1, 1>; if (R == 1 && CH == 2) return K<1, 2>; if (R == 1 && CH == 4) return K<1, 4>; \
  if (R == 2 && CH == 1) return K<2, 1>; if (R == 2 && CH == 2) return K<2, 2>; if (R == 2 && CH == 4) return K<2, 4>; \
  if (R == 4 && CH == 1) return K<4, 1>; if (R == 4 && CH == 2) return K<4, 2>; if (R == 4 && CH == 4) return K<4, 4>; \
  if (R == 8 && CH == 1) return K<8, 1>; if (R == 8 && CH == 2) return K<8, 2>; if (R == 8 && CH == 4) return K<8, 4>;
  if (q6) { SEL(ks6) } else { SEL(ks4) }
  printf("no kernel R=%d CH=%d\n", R, CH); exit(1);
}

static int ruleWarps(int cols) { int w = 1; while (w < 8 && 32 * 64 * w < cols) w *= 2; return w; }

static const Mat* gNext;  // the next launch's matrix in the chain (kp4's prefetch)

static bool enqueue(const Var& v, const Mat& m, cudaStream_t s) {
  const uint8_t* xq = gXQ[m.cols == 4096 ? 0 : 1];
  switch (v.kind) {
  case 0:
    if (m.q6) launchS((KFn)gemvq_q6k_1, (m.rows + 1) / 2, 32 * ruleWarps(m.cols), 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
    else if (m.w1) {
      const uint8_t* z = nullptr; float* zy = nullptr;
      launchS(gemvq_fused_1, (m.rows + 1) / 2, 32 * ruleWarps(m.cols), 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, (const uint8_t*)m.w1, m.rb, zy, m.rows, z, 0LL, zy, 0, m.cols, xq, (int)GLU_SWIGLU);
    } else {
      const uint8_t* z = nullptr; float* zy = nullptr;
      launchS(gemvq_fused_1, (m.rows + 3) / 4, 32 * ruleWarps(m.cols), 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
    }
    return true;
  case 1:
    if (!m.q6 || m.w1) return false;
    launchS((KFn)gemvq_q6k_s_1, (m.rows + GEMVQ6S_R - 1) / GEMVQ6S_R, 32 * ruleWarps(m.cols), (int)(GEMVQ6S_R * m.rb), s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  case 2: {
    const int smem = (int)(v.R * m.rb);
    if (smem > 200 * 1024 || (m.w1 && v.R < 2)) return false;
    const int per = m.w1 ? v.R / 2 : v.R;
    launchS(stagedFn(m.q6, v.R, v.CH), (m.rows + per - 1) / per, 32 * v.warps, smem, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, (const uint8_t*)m.w1);
    return true;
  }
  case 4: {
    if (m.q6 || m.w1) return false;
    PFn f = v.R ? (v.CH == 0 ? kp4<1, 0> : v.CH == 1 ? kp4<1, 1> : kp4<1, 2>) : (v.CH == 0 ? kp4<0, 0> : v.CH == 1 ? kp4<0, 1> : kp4<0, 2>);
    const uint8_t* nx = gNext ? gNext->w : nullptr;
    long long pfb = std::min((long long)v.pfmb << 20, gNext ? gNext->rb * gNext->rows : 0LL);
    launchS(f, (m.rows + 3) / 4, 32 * ruleWarps(m.cols), 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, nx, pfb, std::max(v.tail, 1));
    return true;
  }
  case 5: {
    if (m.q6 || m.w1) return false;
    const int un = v.CH / 10, S = v.CH % 10;
    RFn f = nullptr;
#define KR(RR, UU, SS) if (v.R == RR && un == UU && S == SS) f = kR<RR, UU, SS>;
    KR(2, 1, 1) KR(2, 2, 1) KR(4, 1, 1) KR(4, 2, 1) KR(8, 1, 1) KR(8, 2, 1)
    KR(2, 1, 2) KR(4, 1, 2) KR(4, 1, 4) KR(8, 1, 2) KR(4, 2, 2)
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R * S, 32 * v.warps, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, gP, gCnt);
    return true;
  }
  case 6: {
    if (!m.q6) return false;
    KFn f = nullptr;
    if (v.R == 2 && v.CH == 1) f = k6R<2, 1>;
    if (v.R == 2 && v.CH == 2) f = k6R<2, 2>;
    if (v.R == 4 && v.CH == 1) f = k6R<4, 1>;
    if (v.R == 4 && v.CH == 2) f = k6R<4, 2>;
    if (v.R == 1 && v.CH == 2) f = k6R<1, 2>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 8: {  // split-K partials: R, CH = S*10 + UN (Q4_K) or S*10 (Q6_K), warps; pfmb = 1: + sumparts launch
    const int S = v.CH / 10, un = v.CH % 10, nsb = m.cols / 256;
    if (m.w1 || nsb % S) return false;
    if (m.q6) {
      if ((nsb / S) % 8 || v.R != 4) return false;
      // un == 1: the weight words through ldwords_p (shared-memory loads)
      void (*f6)(const uint8_t*, long long, float*, int, int, const uint8_t*, int) = un == 1 ? ks6p<4, true> : ks6p<4, false>;
      static bool set6[2];
      if (!set6[un == 1]) { CK(cudaFuncSetAttribute(f6, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); set6[un == 1] = true; }
      launchS(f6, (m.rows + 3) / 4 * S, 32 * v.warps, 4 * (nsb / S) * 210, s, (const uint8_t*)m.w, m.rb, gP, m.rows, m.cols, xq, S);
    } else {
      void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*, int) = nullptr;
      if (v.R == 4 && un == 1) f = kq4p<4, 1>;
      if (v.R == 4 && un == 2) f = kq4p<4, 2>;
      if (v.R == 2 && un == 2) f = kq4p<2, 2>;
      if (!f) return false;
      launchS(f, (m.rows + v.R - 1) / v.R * S, 32 * v.warps, 0, s, (const uint8_t*)m.w, m.rb, gP, m.rows, m.cols, xq, S);
    }
    if (v.pfmb) launchS(sumparts, (m.rows + 255) / 256, 256, 0, s, (const float*)gP, m.y, m.rows, S);
    return true;
  }
  case 9: {  // ks6<4, 2, true>: gemvq_q6k_s's structure with shared-memory loads (ldwords_p)
    if (!m.q6 || m.w1) return false;
    static bool set9;
    if (!set9) { CK(cudaFuncSetAttribute(ks6<4, 2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); set9 = true; }
    launchS(ks6<4, 2, true>, (m.rows + 3) / 4, 32 * v.warps, (int)(4 * m.rb), s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, (const uint8_t*)nullptr);
    return true;
  }
  case 7: {  // ks6r: R, CH = NS*100 + C, warps
    if (!m.q6) return false;
    const int NS = v.CH / 100, C = v.CH % 100;
    if ((m.cols / 256) % C) return false;
    void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*, int) = nullptr;
    if (v.R == 2 && NS == 2) f = ks6r<2, 2>;
    if (v.R == 2 && NS == 3) f = ks6r<2, 3>;
    if (v.R == 2 && NS == 4) f = ks6r<2, 4>;
    if (v.R == 4 && NS == 2) f = ks6r<4, 2>;
    if (v.R == 4 && NS == 3) f = ks6r<4, 3>;
    if (v.R == 4 && NS == 4) f = ks6r<4, 4>;
    if (!f) return false;
    static bool set[8][8];
    if (!set[v.R][NS]) { CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); set[v.R][NS] = true; }
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, NS * v.R * C * 210, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, C);
    return true;
  }
  case 10: {  // k6R<R, UN, true> on the re-laid copy: R, CH = UN, warps
    if (!m.q6 || !m.w6s) return false;
    KFn f = nullptr;
    if (v.R == 1 && v.CH == 1) f = k6R<1, 1, true>;
    if (v.R == 1 && v.CH == 2) f = k6R<1, 2, true>;
    if (v.R == 2 && v.CH == 1) f = k6R<2, 1, true>;
    if (v.R == 2 && v.CH == 2) f = k6R<2, 2, true>;
    if (v.R == 4 && v.CH == 1) f = k6R<4, 1, true>;
    if (v.R == 4 && v.CH == 2) f = k6R<4, 2, true>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 11: {  // kdx: R, CH = UN + 10 * QX, warps; Q6_K shapes through the re-laid copy
    if (m.w1 || m.cols != 14336 || (m.q6 && !m.w6s)) return false;
    const int un = v.CH % 10;
    const bool qx = v.CH / 10 == 1;
    void (*f)(const uint8_t*, long long, float*, int, int, const float*, uint8_t*, int*) = nullptr;
#define DX(RR, UU, SS, QQ) if (v.R == RR && un == UU && m.q6 == SS && qx == QQ) f = kdx<RR, UU, SS, QQ>;
    DX(4, 1, false, false) DX(4, 2, false, false) DX(4, 1, false, true) DX(4, 2, false, true)
    DX(4, 1, true, false) DX(4, 2, true, false) DX(4, 1, true, true) DX(4, 2, true, true)
    DX(2, 1, true, false) DX(2, 1, true, true) DX(2, 2, true, false) DX(2, 2, true, true)
#undef DX
    if (!f) return false;
    if (!qx) launchS(gemvq_x, (m.cols / 64 + 7) / 8, 256, 0, s, (const float*)gXf, m.cols, 1, gXQd);
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)(m.q6 ? m.w6s : m.w), m.rb, m.y, m.rows, m.cols,
            (const float*)gXf, gXQd, m.flag);
    return true;
  }
  case 12: {  // k6R<R, UN, true, 1> on the re-laid copy: soa6 with the rows prefetched into L2
    if (!m.q6 || !m.w6s) return false;
    KFn f = nullptr;
    if (v.R == 2 && v.CH == 1) f = k6R<2, 1, true, 1>;
    if (v.R == 2 && v.CH == 2) f = k6R<2, 2, true, 1>;
    if (v.R == 4 && v.CH == 1) f = k6R<4, 1, true, 1>;
    if (v.R == 4 && v.CH == 2) f = k6R<4, 2, true, 1>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 13: {  // kR<R, UN, 1, PF>: Q4_K, CH = UN + 10 * PF
    if (m.q6 || m.w1) return false;
    const int un = v.CH % 10, pf = v.CH / 10;
    RFn f = nullptr;
#define KP(RR, UU, PP) if (v.R == RR && un == UU && pf == PP) f = kR<RR, UU, 1, PP>;
    KP(4, 1, 0) KP(4, 2, 0) KP(4, 1, 1) KP(4, 2, 1) KP(8, 1, 1) KP(8, 1, 0) KP(2, 2, 0) KP(2, 2, 1)
#undef KP
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq, gP, gCnt);
    return true;
  }
  case 16: {  // k6X<R, UN> on the re-laid copy
    if (!m.q6 || !m.w6s) return false;
    KFn f = nullptr;
    if (v.R == 4 && v.CH == 1) f = k6X<4, 1>;
    if (v.R == 4 && v.CH == 2) f = k6X<4, 2>;
    if (v.R == 2 && v.CH == 1) f = k6X<2, 1>;
    if (v.R == 2 && v.CH == 2) f = k6X<2, 2>;
    if (v.R == 8 && v.CH == 1) f = k6X<8, 1>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 17: {  // kgq<OPW = R, UN = CH>: gate/up with down's x quantized in the launch
    if (!m.w1 || m.rows % 64) return false;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*, uint8_t*) = nullptr;
    if (v.R == 4 && v.CH == 1) f = kgq<4, 1>;
    if (v.R == 4 && v.CH == 2) f = kgq<4, 2>;
    if (v.R == 8 && v.CH == 1) f = kgq<8, 1>;
    if (v.R == 8 && v.CH == 2) f = kgq<8, 2>;
    if (v.R == 16 && v.CH == 1) f = kgq<16, 1>;
    if (v.R == 16 && v.CH == 2) f = kgq<16, 2>;
    if (!f) return false;
    launchS(f, m.rows / 64, 64 / v.R * 32, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq, gXQd);
    return true;
  }
  case 18: {  // the step's way: gemvq_fused_1 (GLU) then gemvq_x over its output
    if (!m.w1) return false;
    enqueue(Var{0, 0, 0, 0}, m, s);
    launchS(gemvq_x, (m.rows / 64 + 7) / 8, 256, 0, s, (const float*)m.y, m.rows, 1, gXQd);
    return true;
  }
  case 19: {  // kRing<R, D = CH>, warps
    if (m.q6 || m.w1) return false;
    void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KG(RR, DD) if (v.R == RR && v.CH == DD) f = kRing<RR, DD>;
    KG(4, 1) KG(4, 2) KG(4, 3) KG(4, 4) KG(2, 2) KG(2, 4) KG(2, 6) KG(4, 6)
#undef KG
    if (!f) return false;
    const int smem = (v.CH + 1) * v.R * 2 * 16 * 32 * v.warps;
    static bool set[8][8];
    if (!set[v.R][v.CH]) { CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); set[v.R][v.CH] = true; }
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, smem, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 27: {  // k6RT<R, UN> on the re-laid copy: CH = UN, warps; x from gXT6
    if (!m.q6 || !m.w6s) return false;
    KFn f = nullptr;
    if (v.R == 2 && v.CH == 1) f = k6RT<2, 1>;
    if (v.R == 2 && v.CH == 2) f = k6RT<2, 2>;
    if (v.R == 4 && v.CH == 1) f = k6RT<4, 1>;
    if (v.R == 4 && v.CH == 2) f = k6RT<4, 2>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXT6[m.cols == 4096 ? 0 : 1]);
    return true;
  }
  case 26: {  // kRT<R, UN, GLU>: CH = UN, warps; x from gXT32
    if (m.q6) return false;
    const bool glu = m.w1 != nullptr;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KU(RR, UU) if (v.R == RR && v.CH == UU) f = glu ? kRT<RR, UU, true> : kRT<RR, UU, false>;
    KU(2, 1) KU(2, 2) KU(4, 1) KU(4, 2) KU(8, 1)
#undef KU
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    launchS(f, (m.rows + per - 1) / per, 32 * v.warps, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXT32[m.cols == 4096 ? 0 : 1]);
    return true;
  }
  case 25: {  // kUT<R, UN, GLU, PERM> on the permuted copies: CH = UN, warps
    if (m.q6 || !m.wp) return false;
    const bool glu = m.w1 != nullptr;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KU(RR, UU) if (v.R == RR && v.CH == UU) f = glu ? kUT<RR, UU, true, true> : kUT<RR, UU, false, true>;
    KU(2, 1) KU(2, 2) KU(4, 1) KU(4, 2)
#undef KU
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    launchS(f, (m.rows + per - 1) / per, 32 * v.warps, 0, s, (const uint8_t*)m.wp, (const uint8_t*)m.w1p, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXT[m.cols == 4096 ? 0 : 1]);
    return true;
  }
  case 24: {  // kUT<R, UN, GLU>: CH = UN, warps; x from gXT
    if (m.q6) return false;
    const bool glu = m.w1 != nullptr;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KU(RR, UU) if (v.R == RR && v.CH == UU) f = glu ? kUT<RR, UU, true> : kUT<RR, UU, false>;
    KU(2, 1) KU(2, 2) KU(4, 1) KU(4, 2)
#undef KU
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    launchS(f, (m.rows + per - 1) / per, 32 * v.warps, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXT[m.cols == 4096 ? 0 : 1]);
    return true;
  }
  case 23: {  // kU<R, UN, L1, GLU>: CH = UN + 10 * L1, warps
    if (m.q6) return false;
    const bool glu = m.w1 != nullptr, l1 = v.CH / 10;
    const int un = v.CH % 10;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KU(RR, UU) if (v.R == RR && un == UU) f = l1 ? (glu ? kU<RR, UU, true, true> : kU<RR, UU, true, false>) : (glu ? kU<RR, UU, false, true> : kU<RR, UU, false, false>);
    KU(2, 1) KU(2, 2) KU(4, 1) KU(4, 2)
#undef KU
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    launchS(f, (m.rows + per - 1) / per, 32 * v.warps, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 22: {  // kG<R, GLU>: CH = blocks a multiprocessor, warps
    if (m.q6) return false;
    const bool glu = m.w1 != nullptr;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
    if (v.R == 4) f = glu ? kG<4, true> : kG<4, false>;
    if (v.R == 2) f = glu ? kG<2, true> : kG<2, false>;
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    const int ng = (m.rows + per - 1) / per;
    launchS(f, std::min(ng, SMS * v.CH), 32 * v.warps, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 21: {  // kW<R, UN, GLU>: CH = UN + 10 * GPW, warps = warps a block
    if (m.q6) return false;
    const int un = v.CH % 10, gpw = std::max(1, v.CH / 10);
    const bool glu = m.w1 != nullptr;
    void (*f)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
#define KW(RR, UU) if (v.R == RR && un == UU) f = glu ? kW<RR, UU, true> : kW<RR, UU, false>;
    KW(2, 1) KW(2, 2) KW(4, 1) KW(4, 2) KW(8, 1) KW(2, 4)
#undef KW
    if (!f) return false;
    const int per = glu ? v.R / 2 : v.R;
    const int ng = (m.rows + per - 1) / per, wpb = v.warps * gpw;
    launchS(f, (ng + wpb - 1) / wpb, 32 * v.warps, 0, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 20: {  // kRX<R, UN = CH>, warps
    if (m.q6 || m.w1) return false;
    void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*) = nullptr;
    if (v.R == 4 && v.CH == 1) f = kRX<4, 1>;
    if (v.R == 4 && v.CH == 2) f = kRX<4, 2>;
    if (v.R == 2 && v.CH == 1) f = kRX<2, 1>;
    if (v.R == 2 && v.CH == 2) f = kRX<2, 2>;
    if (v.R == 8 && v.CH == 1) f = kRX<8, 1>;
    if (!f) return false;
    launchS(f, (m.rows + v.R - 1) / v.R, 32 * v.warps, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
    return true;
  }
  case 3:
    launchS(rd, SMS * 4, 256, 0, s, (const uint4*)m.w, (long long)(m.rb * m.rows / 16), gOut);
    if (m.w1) launchS(rd, SMS * 4, 256, 0, s, (const uint4*)m.w1, (long long)(m.rb * m.rows / 16), gOut);
    return true;
  }
  return false;
}

// graphBest instantiates g and replays it once, then times trials batches
// of reps replays back to back and returns the best seconds a replay; it
// destroys g.
static double graphBest(cudaGraph_t g, cudaStream_t s, int trials, int reps) {
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  float best = 1e30;
  for (int t = 0; t < trials; t++) {
    cudaEventRecord(a, s);
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float ms_; cudaEventElapsedTime(&ms_, a, b);
    best = std::min(best, ms_ / reps);
  }
  cudaEventDestroy(a); cudaEventDestroy(b);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return best * 1e-3;
}

static double timeChain(const std::vector<Mat>& ms, const Var& v, cudaStream_t s, int reps = 10) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  if (v.kind == 11) CK(cudaMemsetAsync(gFlags, 0, 4 * gNFlags, s));
  bool ok = true;
  for (size_t i = 0; i < ms.size(); i++) {
    gNext = i + 1 < ms.size() ? &ms[i + 1] : nullptr;
    ok = enqueue(v, ms[i], s) && ok;
  }
  gNext = nullptr;
  CK(cudaStreamEndCapture(s, &g));
  if (!ok) { cudaGraphDestroy(g); return -1; }
  return graphBest(g, s, 3, reps);
}

// chainBest: one launch's best time in a graph of n launches, launch(L)
// enqueuing the L-th (graphBest's trials).
template <class F>
static double chainBest(cudaStream_t s, int n, F launch) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int L = 0; L < n; L++) launch(L);
  CK(cudaStreamEndCapture(s, &g));
  return graphBest(g, s, 5, 10) / n;
}

// runOnce: y (n floats on the device) filled with the byte fill (0xff:
// NaN, so that a row left unwritten shows; 0 where a kernel adds into y),
// then one launch; returns y.
template <class F>
static std::vector<float> runOnce(cudaStream_t s, float* y, int n, int fill, F launch) {
  std::vector<float> h(n);
  CK(cudaMemset(y, fill, 4 * n));
  launch();
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h.data(), y, 4 * n, cudaMemcpyDeviceToHost));
  return h;
}

// maxAbs: the largest |a[i] - b[i]| (b null: |a[i]|).
static double maxAbs(const std::vector<float>& a, const std::vector<float>* b = nullptr) {
  double e = 0;
  for (size_t i = 0; i < a.size(); i++) e = std::max(e, (double)fabsf(a[i] - (b ? (*b)[i] : 0.0f)));
  return e;
}

template <typename F> static void setSmem(F f) { CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); }

// kTC (mode tc, seventh session): Q4_K decode GEMV whose integer dot
// products run on the tensor cores. A warp takes 16 rows (or, GLU, 8 gate
// rows and the same 8 up rows) and one super-block at a time: mma.sync
// m16n8k32 (u8 weights x s8 bytes of x, see TC2 below) gives each row's dot
// product with one 32-element sub-block in one instruction per 16 rows,
// where dp4a needs 8 a row. x goes to every column of B, so c0 = c1 (row
// g) and c2 = c3 (row g + 8) in every lane; lane t keeps chunk t's (the
// sub-block pair of x 64-block 4sb + t) and applies only that chunk's
// scales, so the per-sub-block float work is split over the 4 lanes of a
// row. A lane's weight bytes are bytes 8t..8t+7 of each 32-byte chunk
// (an 8-byte load; a row's 4 lanes read the chunk whole), its x the same
// 8 elements of each half from LP. The k order inside an mma does not
// matter: a0/a2 and b0/b1 hold the same elements in the same bytes. W
// warps a block split a row's super-blocks, UN in flight a warp (the first
// UN before the wait).
__device__ __forceinline__ void mma_u8s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint2 ld_stream2(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
// tc_chunk: one chunk j's two mmas (a0..a3: the raw weight bytes of rows
// a and b in A's order, low nibbles the chunk's first sub-block, high
// nibbles 16x its second; x: the lane's B bytes of both halves), keeping
// the dot products in lane t == j (k*0 the first sub-block, k*1 the
// second, 16x).
__device__ __forceinline__ void tc_chunk(int j, int t, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, const uint4& x,
                                         int& ka0, int& ka1, int& kb0, int& kb1) {
  int cl[4] = {0, 0, 0, 0}, ch[4] = {0, 0, 0, 0};
  mma_u8s8(cl, a0 & 0x0F0F0F0Fu, a1 & 0x0F0F0F0Fu, a2 & 0x0F0F0F0Fu, a3 & 0x0F0F0F0Fu, x.x, x.y);
  mma_u8s8(ch, a0 & 0xF0F0F0F0u, a1 & 0xF0F0F0F0u, a2 & 0xF0F0F0F0u, a3 & 0xF0F0F0F0u, x.z, x.w);
  if (t == j) {
    ka0 = cl[0] * 256 + cl[1];
    kb0 = cl[2] * 256 + cl[3];
    ka1 = ch[0] * 256 + ch[1];
    kb1 = ch[2] * 256 + ch[3];
  }
}
// tc_apply: acc += chunk t's scaled dot products (k0, k1: tc_chunk's) of
// the row whose super-block header is h; sv: the chunk's {S0, S1, sx}.
__device__ __forceinline__ void tc_apply(const uint4& h, int t, int k0, int k1, const uint4& sv, float& acc) {
  const int k = (2 * t) & 3;
  uint32_t sw, mw;
  k4_scale_words(h, t, sw, mw);
  const int sc0 = (int)__byte_perm(sw, 0, 0x4440 | k), sc1 = (int)__byte_perm(sw, 0, 0x4441 + k);
  const int m0 = (int)__byte_perm(mw, 0, 0x4440 | k), m1 = (int)__byte_perm(mw, 0, 0x4441 + k);
  const int ti = sc0 * k0 + sc1 * (k1 >> 4), m = m0 * (int)sv.x + m1 * (int)sv.y;
  acc = fmaf(__uint_as_float(sv.z), fmaf(-h2f(h.x >> 16), (float)m, h2f(h.x & 0xFFFF) * (float)ti), acc);
}
// tc_store: the epilogue of kTC and kTS: rows a (g) and b (g + 8) summed
// over a row's 4 lanes and the block's W warps, stored (GLU: a gate, b up).
template <int W, bool GLU>
__device__ __forceinline__ void tc_store(float acca, float accb, float (&red)[W][16], float* Y, int rows) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  acca += __shfl_xor_sync(0xffffffffu, acca, 1);
  acca += __shfl_xor_sync(0xffffffffu, acca, 2);
  accb += __shfl_xor_sync(0xffffffffu, accb, 1);
  accb += __shfl_xor_sync(0xffffffffu, accb, 2);
  if ((lane & 3) == 0) {
    red[warp][g] = acca;
    red[warp][g + 8] = accb;
  }
  __syncthreads();
  const int i = threadIdx.x;
  if (GLU) {
    if (i < 8 && (int)blockIdx.x * 8 + i < rows) {
      float a = 0.0f, b = 0.0f;
      for (int k = 0; k < W; k++) { a += red[k][i]; b += red[k][i + 8]; }
      Y[blockIdx.x * 8 + i] = glu_act(GLU_SWIGLU, a, b);
    }
  } else if (i < 16 && (int)blockIdx.x * 16 + i < rows) {
    float a = 0.0f;
    for (int k = 0; k < W; k++) a += red[k][i];
    Y[blockIdx.x * 16 + i] = a;
  }
}
// TC2 (second try): x_int split as h * 256 + l with both bytes signed
// (l in [-128, 127], h in [-128, 127]: |x_int| <= 32639), so that one
// mma.u8.s8 takes both: lanes of even groups g hold h in B, odd ones l,
// and c0, c1 (columns 2t, 2t + 1) are row g's dot products with h and l.
// x in LM: per 64-block v, part p (0 h, 1 l) and lane t, 16 bytes at
// 128v + 64p + 16t (elements 8t..8t+7 of the first half, then of the
// second); then per block {S0, S1, sx, 0} at 128 nv + 16v.
struct TCSB {  // one super-block of rows a (g) and b (g + 8), lane t's share
  uint4 ha, hb;
  uint2 qa[4], qb[4];
  // ba, bb: the rows' super-block; o8 = 8t, the lane's bytes of a chunk.
  __device__ __forceinline__ void load(const uint8_t* ba, const uint8_t* bb, int o8) {
    ha = __ldg(reinterpret_cast<const uint4*>(ba));
    hb = __ldg(reinterpret_cast<const uint4*>(bb));
#pragma unroll
    for (int j = 0; j < 4; j++) {
      qa[j] = ld_stream2(ba + 16 + 32 * j + o8);
      qb[j] = ld_stream2(bb + 16 + 32 * j + o8);
    }
  }
  // xb: this lane's LM bytes of the super-block's first 64-block; xs: the
  // super-block's chunk t {S0, S1, sx}.
  __device__ __forceinline__ void dot(int t, const uint8_t* xb, const uint8_t* xs, float& acca, float& accb) const {
    int ka0 = 0, ka1 = 0, kb0 = 0, kb1 = 0;  // chunk t's dot products (lo, hi) of rows a, b
#pragma unroll
    for (int j = 0; j < 4; j++)
      tc_chunk(j, t, qa[j].x, qb[j].x, qa[j].y, qb[j].y, __ldg(reinterpret_cast<const uint4*>(xb + 128 * j)), ka0, ka1, kb0,
               kb1);
    const uint4 sv = __ldg(reinterpret_cast<const uint4*>(xs));
    tc_apply(ha, t, ka0, ka1, sv, acca);
    tc_apply(hb, t, kb0, kb1, sv, accb);
  }
};
template <int W, int UN, bool GLU>
__global__ void __launch_bounds__(32 * W) kTC(const uint8_t* W0, const uint8_t* W1, long long rb, float* Y, int rows,
                                              int cols, const uint8_t* LM) {
  __shared__ float red[W][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const uint8_t *pa, *pb;
  if (GLU) {
    const int r = min((int)blockIdx.x * 8 + g, rows - 1);
    pa = W0 + (long long)r * rb;
    pb = W1 + (long long)r * rb;
  } else {
    pa = W0 + (long long)min((int)blockIdx.x * 16 + g, rows - 1) * rb;
    pb = W0 + (long long)min((int)blockIdx.x * 16 + g + 8, rows - 1) * rb;
  }
  const int nsb = cols >> 8, nv = cols >> 6;
  // Lane pointers at the warp's first super-block; each step advances
  // them by W super-blocks. The walk needs nsb % (W * UN) == 0 (checked
  // by the host), so every warp runs the same iterations and the mma
  // stays in converged code.
  pa += warp * 144;
  pb += warp * 144;
  const uint8_t* xb = LM + 512LL * warp + 64 * (g & 1) + 16 * t;
  const uint8_t* xs = LM + 128LL * nv + 64LL * warp + 16 * t;
  TCSB w[UN];
#pragma unroll
  for (int j = 0; j < UN; j++) w[j].load(pa + j * W * 144, pb + j * W * 144, 8 * t);
  pdl_trigger();
  pdl_wait();
  float acca = 0.0f, accb = 0.0f;
  const int iters = nsb / (W * UN);
  for (int it = 0; it < iters; it++) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      w[j].dot(t, xb + 512LL * W * j, xs + 64LL * W * j, acca, accb);
      if (it + 1 < iters) w[j].load(pa + (j + UN) * W * 144, pb + (j + UN) * W * 144, 8 * t);
    }
    pa += UN * W * 144;
    pb += UN * W * 144;
    xb += 512LL * W * UN;
    xs += 64LL * W * UN;
  }
  tc_store<W, GLU>(acca, accb, red, Y, rows);
}

// kTS (mode ts, seventh session): kTC's tensor-core dot products on
// weights staged in shared memory. A warp owns 16 rows (GLU: 8 gate and
// the same 8 up rows) and a ring of ST super-blocks of them (16 x 144
// bytes each), filled by coalesced 16-byte cp.async (no registers hold
// weights in flight; the first ST are issued before the wait); ldmatrix.x4
// gives a chunk's A fragment (k in byte order), x in the matching order
// (LM2: per 64-block v, part p (h, l) and lane t, 16 bytes at 128v + 64p
// + 16t: elements 4t..4t+3 and 16+4t..16+4t+3 of the first half, then
// the same of the second; {S0, S1, sx} at 128 nv + 16v).
template <int N>
__device__ __forceinline__ void cp_async_wait_n() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
template <int W, int ST, bool GLU>
__global__ void __launch_bounds__(32 * W) kTS(const uint8_t* W0, const uint8_t* W1, long long rb, float* Y, int rows,
                                              int cols, const uint8_t* LM) {
  extern __shared__ uint4 tsm[];
  __shared__ float red[W][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint8_t* ring = reinterpret_cast<uint8_t*>(tsm) + warp * ST * 2304;
  const int nsb = cols >> 8, nv = cols >> 6, n = nsb / W;
  // This lane's chunks of a super-block copy: c = lane + 32i (i < 5, c <
  // 144), row c / 9, piece c % 9.
  const uint8_t* src[5];
  int dst[5];
#pragma unroll
  for (int i = 0; i < 5; i++) {
    const int c = min(lane + 32 * i, 143), r = c / 9, pc = c % 9;
    const uint8_t* base;
    if (GLU) base = (r < 8 ? W0 : W1) + (long long)min((int)blockIdx.x * 8 + (r & 7), rows - 1) * rb;
    else base = W0 + (long long)min((int)blockIdx.x * 16 + r, rows - 1) * rb;
    src[i] = base + 16 * pc + (long long)warp * 144;
    dst[i] = r * 144 + 16 * pc;
  }
  auto copy = [&](int i, int stage) {  // the warp's i-th super-block into stage
    uint8_t* st = ring + stage * 2304;
#pragma unroll
    for (int k = 0; k < 5; k++)
      if (lane + 32 * k < 144)
        cp_async16(reinterpret_cast<uint4*>(st + dst[k]), reinterpret_cast<const uint4*>(src[k] + (long long)i * W * 144));
  };
#pragma unroll
  for (int s = 0; s < ST; s++) {
    if (s < n) copy(s, s);
    cp_async_commit();
  }
  pdl_trigger();
  pdl_wait();
  const uint8_t* xb = LM + 512LL * warp + 64 * (g & 1) + 16 * t;
  const uint8_t* xs = LM + 128LL * nv + 64LL * warp + 16 * t;
  const int m = lane >> 3, lrow = (lane & 7) + 8 * (m & 1), lofs = 16 + 16 * (m >> 1);
  float acca = 0.0f, accb = 0.0f;
  for (int i = 0; i < n; i++) {
    const int stage = i % ST;
    cp_async_wait_n<ST - 1>();
    __syncwarp();
    const uint8_t* st = ring + stage * 2304;
    int ka0 = 0, ka1 = 0, kb0 = 0, kb1 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint32_t a0, a1, a2, a3;
      const unsigned sa = (unsigned)__cvta_generic_to_shared(st + lrow * 144 + lofs + 32 * j);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
                   : "r"(sa));
      tc_chunk(j, t, a0, a1, a2, a3, __ldg(reinterpret_cast<const uint4*>(xb + 128 * j)), ka0, ka1, kb0, kb1);
    }
    const uint4 ha = *reinterpret_cast<const uint4*>(st + g * 144);
    const uint4 hb = *reinterpret_cast<const uint4*>(st + (g + 8) * 144);
    __syncwarp();
    if (i + ST < n) copy(i + ST, stage);
    cp_async_commit();
    const uint4 sv = __ldg(reinterpret_cast<const uint4*>(xs));
    tc_apply(ha, t, ka0, ka1, sv, acca);
    tc_apply(hb, t, kb0, kb1, sv, accb);
    xb += 512LL * W;
    xs += 64LL * W;
  }
  tc_store<W, GLU>(acca, accb, red, Y, rows);
}

// Slices of x that a block quantizes itself (modes sk): SliceP and Slice6,
// gemvq.cu's since its gemvq_sk_* kernels (GEMV v12) came from kSK2/kSK6.

// kSK (mode sk, seventh session): down (Q4_K, pair units) split over
// columns as well as rows, each block quantizing its own slice of x: no
// x launch before it and no wait on other blocks. A block of 8 warps owns
// 1024/NV rows and NV 64-blocks of columns; a lane owns one pair unit of
// 4 rows (its first and only units, loaded before the wait); warp w
// quantizes 64-block w of the slice (SliceP) in shared memory; the NV
// lanes of a row quad are summed by shuffles and added to Y with float
// atomics (Y must start at zero, or hold what the sums add to, e.g. the
// residual stream).
template <int NV>
__global__ void __launch_bounds__(256) kSK(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  constexpr int QW = 32 / NV, RB = 32 * QW;  // row quads a warp, rows a block
  __shared__ SliceP<NV> slice;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int u = lane % NV, q = lane / NV;
  const int nslices = cols / (64 * NV);
  const int rg = blockIdx.x / nslices, sl = blockIdx.x % nslices;
  const int row0 = rg * RB + warp * 4 * QW + q * 4;
  const int v = sl * NV + u;  // the lane's pair unit (64-block of x)
  QW4P w[4];
#pragma unroll
  for (int r = 0; r < 4; r++) w[r].load(W + (long long)min(row0 + r, rows - 1) * rb, v);
  pdl_trigger();
  pdl_wait();
  for (int b = warp; b < NV; b += 8) slice.quant(X + 64LL * sl * NV, b);
  __syncthreads();
  QXP x;
  slice.load(u, x);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 4; r++) w[r].dot(v, x, acc[r]);
#pragma unroll
  for (int o = 1; o < NV; o <<= 1)
#pragma unroll
    for (int r = 0; r < 4; r++) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (u == 0)
#pragma unroll
    for (int r = 0; r < 4; r++)
      if (row0 + r < rows) atomicAdd(Y + row0 + r, acc[r]);
}

// sk_walk (kSK2, kSK6; mode sk): kSK's idea with each block streaming many
// rows through one quantized slice: gemvq.cu's gemvq_sk_walk (a block of
// WP warps owns 16 64-blocks of columns, 1024, and RC rows, two rows a warp
// at a time, UN row pairs in flight, the first before the wait), the block
// quantizing its slice once (Slice, 16/WP 64-blocks a warp) into shared
// memory, each row's slice sum added to Y by a float atomic (rows x 14
// slices of them a launch at 14336 columns). kSK2: Q4_K pair units
// (SliceP, QW4P); kSK6: Q6KA units (Slice6, QW6A).
// PRE: a warp loads the x of all its 64-blocks of the slice before it
// quantizes any (kSK2P, kSK6P: one load latency instead of 16/WP).
// slice_quant (kSK2P, kSK6P): the block's WP warps quantize the 16
// 64-blocks of the slice at X into s, each warp issuing the loads of all
// of its 64-blocks before it quantizes any.
template <int WP, class Slice>
__device__ __forceinline__ void slice_quant(Slice& s, const float* X, int warp) {
  constexpr int NB = (16 + WP - 1) / WP;
  float2 xv[NB];
#pragma unroll
  for (int i = 0; i < NB; i++)
    if (warp + WP * i < 16) xv[i] = reinterpret_cast<const float2*>(X + 64 * (warp + WP * i))[threadIdx.x & 31];
#pragma unroll
  for (int i = 0; i < NB; i++)
    if (warp + WP * i < 16) s.quant(xv[i], warp + WP * i);
}
template <class Slice, class QW, class QX, int RC, int UN, int WP, bool PRE = false>
__device__ __forceinline__ void sk_walk(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  __shared__ Slice slice;
  gemvq_sk_walk<QW, QX, RC, UN, WP>(
      W, rb, rows, cols,
      [&](int, int sl, int warp, int u, QX& x) {
        if (PRE) {
          slice_quant<WP>(slice, X + 1024LL * sl, warp);
        } else {
          for (int b = warp; b < 16; b += WP) slice.quant(X + 1024LL * sl, b);
        }
        __syncthreads();
        slice.load(u, x);
      },
      [&](int r, float acc) { atomicAdd(Y + r, acc); });
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK2P(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sk_walk<SliceP<16>, QW4P, QXP, RC, UN, WP, true>(W, rb, Y, rows, cols, X);
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK6P(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sk_walk<Slice6<16>, QW6A, QX6, RC, UN, WP, true>(W, rb, Y, rows, cols, X);
}

// QW6B / kSK6B (mode sk, ninth session): timing only, for a Q6_K re-lay
// other than T_Q6_KA. A unit's 48 bytes as three 16-byte words A, B, C
// (T_Q6_KA's a, c, hb places) whose bytes hold quarters 0-2's weights in
// their low 6 bits and quarter 3's in their top two (A: its weight's bits
// 0-1, B: 2-3, C: 4-5), so a quarter 0-2 word is one AND where T_Q6_KA's
// is a shift, two masks and an OR, and quarter 3's is three shifts and
// selects. The sweep's data is T_Q6_KA, so the sums differ (max |dy| is
// not a check); the instructions are what such a layout would run.
struct QW6B : QW6 {
  __device__ __forceinline__ void load(const uint8_t* row, int u) { load_a(row, u); }
  __device__ __forceinline__ void dot(int, const QX6& x, float& acc) const {
    q6_dot_with(
        [&](int qq, uint32_t (&q)[4]) {
#pragma unroll
          for (int jj = 0; jj < 4; jj++) {
            if (qq == 0) {
              q[jj] = a[jj] & 0x3F3F3F3Fu;
            } else if (qq == 1) {
              q[jj] = c[jj] & 0x3F3F3F3Fu;
            } else if (qq == 2) {
              q[jj] = hb[jj] & 0x3F3F3F3Fu;
            } else {
              q[jj] = ((a[jj] >> 6) & 0x03030303u) | ((c[jj] >> 4) & 0x0C0C0C0Cu) | ((hb[jj] >> 2) & 0x30303030u);
            }
          }
        },
        sc, d, x, acc);
  }
};
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK6B(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sk_walk<Slice6<16>, QW6B, QX6, RC, UN, WP, true>(W, rb, Y, rows, cols, X);
}

// kSK2S / kSK6S (mode sk; prepared in the ninth session, not yet run): the
// sliced walk (kSK2P / kSK6P) with each dot product reading its x from the
// slice in shared memory (the asm barrier keeps the compiler from holding
// it in registers across the walk) instead of a lane holding its unit's x
// in registers for the whole walk (~36 of ~118 registers): whether the
// registers freed carry more row pairs in flight (UN 4-8) at the same two
// blocks a multiprocessor, or, at fewer rows a block, three blocks (RC
// 160: 364 blocks; kSK6S at UN 3 takes 80 registers where kSK6P takes
// 120). The Q6KA kernel issues an instruction only ~37% of the time
// (kernels/NOTES.md, GEMV v13): it waits on its loads.
template <class Slice, class QW, class QX, int RC, int UN, int WP>
__device__ __forceinline__ void sks_walk(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  __shared__ Slice slice;
  gemvq_sk_walk<QW, QX, RC, UN, WP>(
      W, rb, rows, cols,
      [&](int, int sl, int warp, int, QX&) {
        slice_quant<WP>(slice, X + 1024LL * sl, warp);
        __syncthreads();
      },
      [&](int r, float acc) { atomicAdd(Y + r, acc); },
      [&](int u, QX& x) {
        asm volatile("" ::: "memory");
        slice.load(u, x);
      });
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK2S(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sks_walk<SliceP<16>, QW4P, QXP, RC, UN, WP>(W, rb, Y, rows, cols, X);
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK6S(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sks_walk<Slice6<16>, QW6A, QX6, RC, UN, WP>(W, rb, Y, rows, cols, X);
}

// kSKH2 / kSKH6 (mode sk, eighth session): sk_walk with x already
// quantized (X is gemvq_x's output for the whole vector): each lane loads
// its unit's x from global memory after the wait, as the one-vector
// kernels do, instead of its block quantizing the slice: what the slices'
// own quantization costs the walk.
template <class QW, class QX, int RC, int UN, int WP>
__device__ __forceinline__ void skh_walk(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  gemvq_sk_walk<QW, QX, RC, UN, WP>(
      W, rb, rows, cols, [&](int, int sl, int, int u, QX& x) { x.load(XQ, cols, sl * 16 + u); },
      [&](int r, float acc) { atomicAdd(Y + r, acc); });
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKH2(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  skh_walk<QW4P, QXP, RC, UN, WP>(W, rb, Y, rows, cols, reinterpret_cast<const uint8_t*>(X));
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKH6(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  skh_walk<QW6A, QX6, RC, UN, WP>(W, rb, Y, rows, cols, reinterpret_cast<const uint8_t*>(X));
}
template <int RC, int UN, int WP = 8>
__global__ void __launch_bounds__(32 * WP) kSK2(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sk_walk<SliceP<16>, QW4P, QXP, RC, UN, WP>(W, rb, Y, rows, cols, X);
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSK6(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  sk_walk<Slice6<16>, QW6A, QX6, RC, UN, WP>(W, rb, Y, rows, cols, X);
}

// kCA (mode ca, tenth session): persistent blocks that stream row groups of
// R rows (R * rb contiguous bytes) through an S-stage ring in shared memory
// by 16-byte cp.async, so that a block keeps S - 1 groups in flight
// without holding them in registers, and loads its lanes' x once (the
// lane's pair unit is the same in every group). 4096 columns (64 pair
// units): thread t takes unit t % 64 of rows t / 64 + RH k of each group
// (RH = NT / 64). Row sums: each warp's shuffles, then the two warps of a
// row added in shared memory, written one group later. Why: the multi-wave
// launches (gate/up, the output) hold a block's weights in registers only
// until its one group is computed, so what a multiprocessor has in flight
// falls with every block's x wait, dot products and reduction; the
// read-only kernel reaches 0.95 of D2D with ~64 KB a multiprocessor kept
// in flight (kernels/NOTES.md), gemvq_fused_1 on gate+up 0.89. kCA and
// kCA6 stay copies of gemvq_ca_body's walk (below) on purpose: written
// through it (a unit-type parameter, its plain mode), the same results,
// the gate+up ring ran 16.09 µs against this copy's 15.27 (R8 S4 t256,
// tenth session, one call on another machine: gemvq_fused_1 17.43 there
// against 17.24), so the -ca*.txt figures would no longer reproduce.
template <int R, int S, int NT>
__global__ void __launch_bounds__(NT) kCA(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  extern __shared__ __align__(16) uint8_t caring[];
  uint8_t* ring = caring;
  constexpr int RH = NT / 64, RK = R / RH, NWR = 2;  // rows a thread, warps a row
  __shared__ float red[2][R][NWR];
  const int t = threadIdx.x, u = t & 63, rh = t >> 6, lane = t & 31, wr = (t >> 5) & 1;
  const int groups = rows / R;
  const long long gb = (long long)R * rb;
  const int n16 = (int)(gb >> 4);
  auto issue = [&](int g, int st) {
    if (g < groups) {
      const uint4* src = reinterpret_cast<const uint4*>(W + (long long)g * gb);
      uint4* dst = reinterpret_cast<uint4*>(ring + (long long)st * gb);
      for (int i = t; i < n16; i += NT) cp_async16(dst + i, src + i);
    }
    cp_async_commit();
  };
  const int g0 = blockIdx.x, G = gridDim.x;
#pragma unroll
  for (int k = 0; k < S - 1; k++) issue(g0 + k * G, k);
  pdl_trigger();
  pdl_wait();
  QXP x;
  x.load(XQ, cols, u);
  int prev = -1;
  for (int i = 0;; i++) {
    const int g = g0 + i * G;
    cp_async_wait_n<S - 2>();
    __syncthreads();
    if (prev >= 0 && t < R) Y[prev * R + t] = red[(i - 1) & 1][t][0] + red[(i - 1) & 1][t][1];
    if (g >= groups) break;
    issue(g + (S - 1) * G, (i + S - 1) % S);
    const uint8_t* st = ring + (long long)(i % S) * gb;
#pragma unroll
    for (int k = 0; k < RK; k++) {
      const int r = rh + RH * k;
      const uint8_t* b = st + r * rb + (u >> 2) * 144;
      QW4P w;
      w.h = *reinterpret_cast<const uint4*>(b);
      w.q0 = *reinterpret_cast<const uint4*>(b + 16 + 32 * (u & 3));
      w.q1 = *reinterpret_cast<const uint4*>(b + 32 + 32 * (u & 3));
      float acc = 0.0f;
      w.dot(u, x, acc);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) red[i & 1][r][wr] = acc;
    }
    prev = g;
  }
}

// kCA6 (mode ca): kCA for Q6KA rows (the output projection 128256x4096):
// the same ring, QW6A's unit read from shared memory (a stage starts
// 16-byte aligned and rb % 16 == 0, so each super-block's padding, which
// depends on its address mod 16, reads as in global memory), x by QX6.
template <int R, int S, int NT>
__global__ void __launch_bounds__(NT) kCA6(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  extern __shared__ uint4 ca6ring4[];
  uint8_t* ring = reinterpret_cast<uint8_t*>(ca6ring4);
  constexpr int RH = NT / 64, RK = R / RH;
  __shared__ float red[2][R][2];
  const int t = threadIdx.x, u = t & 63, rh = t >> 6, wr = (t >> 5) & 1;
  const int groups = (rows + R - 1) / R;
  const long long gb = (long long)R * rb;
  const int rowChunks = (int)(rb >> 4);
  auto issue = [&](int g, int st) {
    if (g < groups) {
      const int c = min(R, rows - g * R) * rowChunks;
      const uint4* src = reinterpret_cast<const uint4*>(W + (long long)g * gb);
      uint4* dst = reinterpret_cast<uint4*>(ring + (long long)st * gb);
      for (int i = t; i < c; i += NT) cp_async16(dst + i, src + i);
    }
    cp_async_commit();
  };
  const int g0 = blockIdx.x, NG = gridDim.x;
#pragma unroll
  for (int k = 0; k < S - 1; k++) issue(g0 + k * NG, k);
  pdl_trigger();
  pdl_wait();
  QX6 x;
  x.load(XQ, cols, u);
  int prev = -1;
  for (int i = 0;; i++) {
    const int g = g0 + i * NG;
    cp_async_wait_n<S - 2>();
    __syncthreads();
    if (prev >= 0 && t < R && prev * R + t < rows) Y[prev * R + t] = red[(i - 1) & 1][t][0] + red[(i - 1) & 1][t][1];
    if (g >= groups) break;
    issue(g + (S - 1) * NG, (i + S - 1) % S);
    const uint8_t* st = ring + (long long)(i % S) * gb;
#pragma unroll
    for (int k = 0; k < RK; k++) {
      const int r = rh + RH * k;
      const uint8_t* b = st + r * rb + (u >> 2) * 210;
      const int p = q6ka_pad(b), kk = u & 3;
      const uint8_t* q = b + p + 48 * kk;
      QW6A w;
      const uint4 A = *reinterpret_cast<const uint4*>(q), C = *reinterpret_cast<const uint4*>(q + 16),
                  H = *reinterpret_cast<const uint4*>(q + 32);
      w.a[0] = A.x; w.a[1] = A.y; w.a[2] = A.z; w.a[3] = A.w;
      w.c[0] = C.x; w.c[1] = C.y; w.c[2] = C.z; w.c[3] = C.w;
      w.hb[0] = H.x; w.hb[1] = H.y; w.hb[2] = H.z; w.hb[3] = H.w;
      w.sc = q6ka_scales(b, p, kk);
      w.d = q6ka_d(b, p);
      float acc = 0.0f;
      w.dot(u, x, acc);
      acc = warp_sum(acc);
      if ((t & 31) == 0) red[i & 1][r][wr] = acc;
    }
    prev = g;
  }
}

// ---- gemvq_ca_body (modes ca, cachain; tenth session; production for a
// few hours of it, then moved here: see kernels/NOTES.md, GEMV v14) ----
//
// Why: in a multi-wave launch (gate/up: 7168 blocks of gemvq_fused_1) a
// block holds its weights in registers only until they arrive; while it
// waits for x, computes and reduces, it has nothing in flight, so what a
// multiprocessor keeps in flight swings with its blocks' phases. The
// read-only kernel reaches 0.95 of D2D with ~64 KB a multiprocessor kept
// in flight (kernels/NOTES.md, GEMV v9); gemvq_fused_1 on gate+up 0.90.
// Here a grid of a few blocks a multiprocessor walks the row groups, each
// block keeping S - 1 groups in flight by 16-byte cp.async into a ring of
// S stages in shared memory, which holds no registers while the copies
// are in flight, and loading its lanes' x once (a lane's pair unit is the
// same in every group. Alone (32 launches back to back) it beats every
// register-bound kernel (gate+up 17.24 -> 15.28 µs, the output 107.4 ->
// 98-100); next to the step's other GEMVs it loses 4-5 µs at each
// boundary (mode cachain; in the engine the step's GEMVs 1.35 -> 1.71
// ms), which NOTES.md puts down to the multiprocessors' shared memory /
// L1 split changing between it and its neighbours.
//
// gemvq_ca_body: Y = W x (mode GLU_PLAIN: W0's rows), or glu_act of W0's
// (gate) and W1's (up) rows; one quantized vector, Q4_K pair units, rows
// of at most 4096 columns (cols % 256 == 0, rb % 16 == 0, W0 and W1
// 16-byte aligned: the launcher checks). A group is R rows of the ring,
// G = R output rows (plain) or R/2 gate and the same R/2 up rows (GLU);
// group g, block b: g = b + gridDim.x k. Thread t takes pair unit t % 64
// of the group's rows t / 64 + (NT/64) k. Each row's sum: a warp's
// shuffles (warp_sum), then its two warps' sums added in warp order, as
// gemvq_p4_1 sums a 4096-column row; stored one iteration later (GLU:
// MAXG groups later, see pend). LATE: the dependent launch triggered at
// each block's last group instead of at its start.
template <int R, int S, int NT, bool LATE = false>
__device__ __forceinline__ void gemvq_ca_body(const uint8_t* W0, const uint8_t* W1, long long rb, float* Y, int rows,
                                              int cols, const uint8_t* XQ, int mode) {
  extern __shared__ uint4 gemvq_ca_ring4[];
  uint8_t* const gemvq_ca_ring = reinterpret_cast<uint8_t*>(gemvq_ca_ring4);
  constexpr int RH = NT / 64, RK = R / RH, MAXG = 16;
  static_assert(NT % 64 == 0 && R % RH == 0 && R % 2 == 0 && MAXG * R / 2 <= NT, "gemvq_ca: 64 lanes a row");
  __shared__ float red[2][R][2];
  // GLU: each group's gate and up sums, until MAXG groups are pending;
  // then every output's glu_act at once (one thread each), so that its
  // float64 exp is one latency a MAXG groups, not one a group that the
  // whole block waits on at the next barrier.
  __shared__ float pend[MAXG][R];
  __shared__ int pendRow[MAXG];
  const bool glu = mode != GLU_PLAIN;
  const int t = threadIdx.x, u = t & 63, rh = t >> 6, wr = (t >> 5) & 1, nv = cols >> 6;
  const int G = glu ? R / 2 : R;
  const int groups = (rows + G - 1) / G;
  const long long gb = (long long)R * rb;
  const int rowChunks = (int)(rb >> 4);
  auto issue = [&](int g, int st) {
    if (g < groups) {
      const int c = min(G, rows - g * G) * rowChunks;
      uint4* dst = reinterpret_cast<uint4*>(gemvq_ca_ring + (long long)st * gb);
      const uint4* s0 = reinterpret_cast<const uint4*>(W0 + (long long)g * G * rb);
      for (int i = t; i < c; i += NT) cp_async16(dst + i, s0 + i);
      if (glu) {
        const uint4* s1 = reinterpret_cast<const uint4*>(W1 + (long long)g * G * rb);
        for (int i = t; i < c; i += NT) cp_async16(dst + G * rowChunks + i, s1 + i);
      }
    }
    cp_async_commit();
  };
  // flush: the pending groups' outputs (after a barrier).
  auto flush = [&](int n) {
    if (t < n * G) {
      const int j = t / G, r = t - j * G, row = pendRow[j] * G + r;
      if (row < rows) Y[row] = glu_act(mode, pend[j][r], pend[j][G + r]);
    }
  };
  const int g0 = blockIdx.x, NG = gridDim.x;
#pragma unroll
  for (int k = 0; k < S - 1; k++) issue(g0 + k * NG, k);
  if (!LATE) pdl_trigger();
  pdl_wait();
  QXP x;
  if (u < nv) x.load(XQ, cols, u);
  int prev = -1, np = 0;
  for (int i = 0;; i++) {
    const int g = g0 + i * NG;
    cp_async_wait_n<S - 2>();
    __syncthreads();
    if (prev >= 0) {
      const float (&p)[R][2] = red[(i - 1) & 1];
      if (!glu) {
        if (t < G && prev * G + t < rows) Y[prev * G + t] = p[t][0] + p[t][1];
      } else {
        if (t < R) pend[np][t] = p[t][0] + p[t][1];
        if (t == 0) pendRow[np] = prev;
        if (++np == MAXG) {
          __syncthreads();
          flush(np);
          np = 0;
        }
      }
    }
    if (g >= groups) break;
    if (LATE && g + NG >= groups) pdl_trigger();
    issue(g + (S - 1) * NG, (i + S - 1) % S);
    const uint8_t* st = gemvq_ca_ring + (long long)(i % S) * gb;
#pragma unroll
    for (int k = 0; k < RK; k++) {
      const int r = rh + RH * k;
      float acc = 0.0f;
      if (u < nv) {
        const uint8_t* b = st + r * rb + (u >> 2) * 144;
        QW4P w;
        w.h = *reinterpret_cast<const uint4*>(b);
        w.q0 = *reinterpret_cast<const uint4*>(b + 16 + 32 * (u & 3));
        w.q1 = *reinterpret_cast<const uint4*>(b + 32 + 32 * (u & 3));
        w.dot(u, x, acc);
      }
      acc = warp_sum(acc);
      if ((t & 31) == 0) red[i & 1][r][wr] = acc;
    }
    prev = g;
  }
  if (np > 0) {
    __syncthreads();
    flush(np);
  }
}


// kCAG (modes ca, cachain): gemvq_ca_body's instances; kCA8 is the one
// the logs call gemvq_ca_1 (its geometry while it was production code).
template <int R, int S, int NT, bool LATE>
__global__ void __launch_bounds__(NT) kCAG(const uint8_t* W0, const uint8_t* W1, long long rb, float* Y, int rows, int cols,
                                           const uint8_t* XQ, int mode) {
  gemvq_ca_body<R, S, NT, LATE>(W0, W1, rb, Y, rows, cols, XQ, mode);
}
static void (*const kCA8)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*, int) = kCAG<8, 4, 256, false>;

// kSKL2 / kSKL6 (mode sk, tenth session): the sliced walk over a matrix
// re-laid slice-major (slicemajor: each 1024-column slice's rows back to
// back, 576 / 840 bytes a row), so that a block's rows are one contiguous
// run instead of 576 / 840-byte pieces 8064 / 11760 bytes apart: whether
// DRAM locality is what the sliced down loses against reading whole rows.
__global__ void slicemajor(const uint8_t* src, uint8_t* dst, int rows, int sbPerRow, int sbBytes) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)rows * sbPerRow) return;
  const int r = (int)(i / sbPerRow), j = (int)(i % sbPerRow), sl = j / 4, jj = j % 4;
  const uint8_t* a = src + i * sbBytes;
  uint8_t* d = dst + (((long long)sl * rows + r) * 4 + jj) * sbBytes;
  for (int b = 0; b < sbBytes; b++) d[b] = a[b];
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKL2(const uint8_t* W, long long, float* Y, int rows, int cols, const float* X) {
  const int sl = blockIdx.x % (cols >> 10);
  sk_walk<SliceP<16>, QW4P, QXP, RC, UN, WP>(W + (long long)sl * (rows - 1) * 576, 576, Y, rows, cols, X);
}
template <int RC, int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKL6(const uint8_t* W, long long, float* Y, int rows, int cols, const float* X) {
  const int sl = blockIdx.x % (cols >> 10);
  sk_walk<Slice6<16>, QW6A, QX6, RC, UN, WP>(W + (long long)sl * (rows - 1) * 840, 840, Y, rows, cols, X);
}

// ske_walk (kSKE4, kSKE6; mode sk): sk_walk with the rows split evenly
// over the launch's row chunks (gridDim.x / slices of them, any number),
// so that a launch can take one block per multiprocessor (9 chunks x 14
// slices = 126 of 132) instead of 4096/RC chunks (8 x 14 = 112, 20 idle).
// Chunk c owns row pairs [c P / C, (c+1) P / C) of the P = rows/2; warp w
// walks its pairs w, w + WP, ... of them.
template <class Slice, class QW, class QX, int UN, int WP>
__device__ __forceinline__ void ske_walk(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  __shared__ Slice slice;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int u = lane & 15, half = lane >> 4;
  const int nslices = cols / 1024, chunks = gridDim.x / nslices;
  const int rc = blockIdx.x / nslices, sl = blockIdx.x % nslices;
  const int P = rows >> 1, p0 = (int)((long long)rc * P / chunks), p1 = (int)((long long)(rc + 1) * P / chunks);
  const int v = sl * 16 + u;
  const int np = (p1 - p0 - warp + WP - 1) / WP;  // pairs of this warp
  auto row = [&](int k) { return 2 * (p0 + warp + WP * k) + half; };
  auto rowp = [&](int k) { return W + (long long)min(row(k), rows - 1) * rb; };
  QW w[UN];
#pragma unroll
  for (int j = 0; j < UN; j++)
    if (j < np) w[j].load(rowp(j), v);
  pdl_trigger();
  pdl_wait();
  for (int b = warp; b < 16; b += WP) slice.quant(X + 1024LL * sl, b);
  __syncthreads();
  QX x;
  slice.load(u, x);
  for (int k0 = 0; k0 < np; k0 += UN) {
#pragma unroll
    for (int j = 0; j < UN; j++) {
      const int k = k0 + j;
      if (k < np) {
        float acc = 0.0f;
        w[j].dot(v, x, acc);
        if (k + UN < np) w[j].load(rowp(k + UN), v);
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (u == 0) atomicAdd(Y + row(k), acc);
      }
    }
  }
}
template <int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKE4(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  ske_walk<SliceP<16>, QW4P, QXP, UN, WP>(W, rb, Y, rows, cols, X);
}
template <int UN, int WP>
__global__ void __launch_bounds__(32 * WP) kSKE6(const uint8_t* W, long long rb, float* Y, int rows, int cols, const float* X) {
  ske_walk<Slice6<16>, QW6A, QX6, UN, WP>(W, rb, Y, rows, cols, X);
}

// mixa_body: gemvq_mixed_a_1's dispatch (its gemvq_mixed_body<true>) with
// R6 rows a block for the Q6KA matrix; REV: the Q4_K blocks first.
template <int R6, bool REV>
__device__ __forceinline__ void mixa_body(const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1,
                                          long long rb1, float* Y1, int rows1, const uint8_t* W2, long long rb2,
                                          float* Y2, int rows2, int cols, const uint8_t* XQ) {
  const int g6 = (rows2 + R6 - 1) / R6, g4 = (rows0 + rows1 + GEMVQ_R - 1) / GEMVQ_R;
  const int b = REV ? ((int)blockIdx.x < g4 ? (int)blockIdx.x + g6 : (int)blockIdx.x - g4) : (int)blockIdx.x;
  if (b < g6) {
    gemvq_q6ka_body<1, R6, 1>(W2, rb2, Y2, rows2, cols, XQ, b);
  } else {
    gemvq_body<1, 1>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, nullptr, 0, nullptr, 0, cols, XQ, GLU_PLAIN, b - g6);
  }
}

// kMixA: gemvq_mixed_a_1 with R6 rows a block for the Q6KA matrix (the
// engine's kernel has GEMVQ6_R = 2, at 100 registers for every block, the
// Q4_K ones included): mode qkv6's R6 = 1 row, to see whether the Q4_K
// blocks' occupancy comes back (seventh session).
template <int R6>
__global__ void __launch_bounds__(256) kMixA(const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1,
                                             long long rb1, float* Y1, int rows1, const uint8_t* W2, long long rb2,
                                             float* Y2, int rows2, int cols, const uint8_t* XQ) {
  mixa_body<R6, false>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ);
}

// kMixAL: kMixA under __launch_bounds__(64, MINB) (MINB blocks of 2 warps a
// multiprocessor: 14 caps the registers at 73, gemvq_fused_1's count), so
// that the mixed launch fits one wave at the Q4_K kernel's occupancy; REV:
// the Q4_K blocks first (seventh session).
template <int R6, int MINB, bool REV>
__global__ void __launch_bounds__(64, MINB) kMixAL(const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                                  const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                                  const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                                                  const uint8_t* XQ) {
  mixa_body<R6, REV>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ);
}

// kCap: gemvq_fused_1 / gemvq_fused_u2_1 (gemvq_body<1, UN>) under
// __launch_bounds__(64, MINB), mode cap (seventh session): more blocks a
// multiprocessor for gate/up and q/k/v, or u2 for q/k/v in one wave.
template <int UN, int MINB>
__global__ void __launch_bounds__(64, MINB) kCap(const uint8_t* W0, long long rb0, float* Y0, int rows0,
                                                const uint8_t* W1, long long rb1, float* Y1, int rows1,
                                                const uint8_t* W2, long long rb2, float* Y2, int rows2, int cols,
                                                const uint8_t* XQ, int mode) {
  gemvq_body<1, UN>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, W2, rb2, Y2, rows2, cols, XQ, mode, blockIdx.x);
}

// kP: gemvq_p_body<R, UN> (the pair-unit kernels' body) in other
// geometries, mode p8 (seventh session): 8 rows a block, so that q/k/v
// 6144x4096 fits the device in one wave with every weight in flight
// before the wait (768 blocks of 2 warps).
template <int R, int UN>
__global__ void __launch_bounds__(256) kP(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  gemvq_p_body<R, UN>(W, rb, Y, rows, cols, XQ);
}

// kPX / kFX (mode p8, ninth session): gemvq_p_body<R, UN> (o's kernel) and
// gemvq_body (q/k/v's, gemvq_fused_1) with x made up in registers from
// the unit index and X's address instead of loaded: what fetching x costs
// after the wait, when every block of a wave fetches the whole vector at
// once (1024 blocks x 8.8 KB for o). Timing only (the sums are wrong).
__device__ __forceinline__ uint32_t fakew(const uint8_t* base, int v, int i) {
  return (uint32_t)(uintptr_t)base ^ ((uint32_t)v * 0x9E3779B9u + (uint32_t)i * 0x85EBCA6Bu);
}
struct QXPF : QXP {
  __device__ __forceinline__ void load(const uint8_t* base, int, int v) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      h[i] = make_uint4(fakew(base, v, i), fakew(base, v, i + 4), fakew(base, v, i + 8), fakew(base, v, i + 12));
      l[i] = make_uint4(fakew(base, v, i + 16), fakew(base, v, i + 20), fakew(base, v, i + 24), fakew(base, v, i + 28));
    }
    S0 = (int)fakew(base, v, 32) >> 12;
    S1 = (int)fakew(base, v, 33) >> 12;
    sx = (float)(fakew(base, v, 34) & 0xffff);
  }
};
struct QXUF : QXU {
  __device__ __forceinline__ void load(const uint8_t* base, int, int u) {
    xh0 = make_uint4(fakew(base, u, 0), fakew(base, u, 1), fakew(base, u, 2), fakew(base, u, 3));
    xh1 = make_uint4(fakew(base, u, 4), fakew(base, u, 5), fakew(base, u, 6), fakew(base, u, 7));
    xl0 = make_uint4(fakew(base, u, 8), fakew(base, u, 9), fakew(base, u, 10), fakew(base, u, 11));
    xl1 = make_uint4(fakew(base, u, 12), fakew(base, u, 13), fakew(base, u, 14), fakew(base, u, 15));
    s0 = (int)fakew(base, u, 16) >> 12;
    s1 = (int)fakew(base, u, 17) >> 12;
    sx = (float)(fakew(base, u, 18) & 0xffff);
  }
};
template <int R, int UN>
__global__ void __launch_bounds__(256) kPX(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  gemvq_p_body<R, UN, QXPF>(W, rb, Y, rows, cols, XQ);
}
__global__ void __launch_bounds__(256) kFX(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  constexpr int R = GEMVQ_R;
  __shared__ float red[8 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][1];
  zero_acc(acc);
  gemvq_walk<QW4, QXUF, 1, R, 1>(rp, cols >> 5, cols, XQ, acc);
  gemv_rows_store<R, 1>(acc, red, blockDim.x >> 5, R, GLU_PLAIN, row0, rows, Y);
}

// kPB (mode p8, ninth session): o's pair-unit walk (gemvq_p4_1: a lane
// holds unit u of R rows, all in flight before the wait) in blocks of G
// groups of 64 lanes, R rows a group, whose x (LP, 8960 bytes at 4096
// columns) the block copies into shared memory once after the wait, where
// gemvq_p4_1's 1024 blocks of 2 warps each fetch the whole vector through
// L1 at the same moment (kPX: ~0.6 us of o's 3.95). cols must be 4096
// (64 units, one a lane). Same lanes, sums and order as gemvq_p4_1: the
// same bits.
template <int R, int G>
__global__ void __launch_bounds__(64 * G) kPB(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  constexpr int NV = 64, XU4 = 140 * NV / 16;
  __shared__ uint4 xs[XU4];
  __shared__ float red[2 * G * R];
  const int tid = threadIdx.x, g = tid >> 6, u = tid & 63, warp = tid >> 5, lane = tid & 31;
  const int row0 = (blockIdx.x * G + g) * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  QW4P w[R];
#pragma unroll
  for (int r = 0; r < R; r++) w[r].load(rp[r], u);
  pdl_trigger();
  pdl_wait();
  const uint4* lp = reinterpret_cast<const uint4*>(XQ + gemvq_lp(cols));
  for (int i = tid; i < XU4; i += 64 * G) xs[i] = __ldg(lp + i);
  __syncthreads();
  QXP x;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    x.h[i] = xs[i * NV + u];
    x.l[i] = xs[(4 + i) * NV + u];
  }
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(xs);
  const int2 sg = reinterpret_cast<const int2*>(xb + 128 * NV)[u];
  x.S0 = sg.x;
  x.S1 = sg.y;
  x.sx = reinterpret_cast<const float*>(xb + 136 * NV)[u];
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    acc[r] = 0.0f;
    w[r].dot(u, x, acc[r]);
    acc[r] = warp_sum(acc[r]);
  }
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; r++) red[warp * R + r] = acc[r];
  __syncthreads();
  if (tid < G * R) {
    const int gg = tid / R, r = tid - gg * R, row = (blockIdx.x * G + gg) * R + r;
    float sum = 0.0f;
    sum += red[2 * gg * R + r];
    sum += red[(2 * gg + 1) * R + r];
    if (row < rows) Y[row] = sum;
  }
}

// kPH (mode p8, ninth session): o's kernel (gemvq_p4_1's lanes: unit u of
// R rows, 2 warps, cols 4096) with only RPRE rows' weights in flight before
// the wait, x loaded right after it, then the other rows': whether x,
// loaded behind every weight of the block, waits for them (kPX: ~0.6 us of
// o's 3.95 is x). CG: x by ld.global.cg (L2 only). Since the ninth
// session's review it is gemvq_split_rows (gemvq_ps6_1's walk) on one
// matrix; its logged timings (-p8e..g.txt) come from a copy of that walk
// without the u < cols / 64 guard.
struct QXPCG : QXP {
  __device__ __forceinline__ void load(const uint8_t* base, int cols, int v) {
    const int nv = cols >> 6;
    const uint4* t = reinterpret_cast<const uint4*>(base + gemvq_lp(cols));
#pragma unroll
    for (int i = 0; i < 4; i++) {
      h[i] = __ldcg(t + i * nv + v);
      l[i] = __ldcg(t + (4 + i) * nv + v);
    }
    const uint8_t* lp = base + gemvq_lp(cols);
    const int2 g = __ldcg(reinterpret_cast<const int2*>(lp + 128LL * nv) + v);
    S0 = g.x;
    S1 = g.y;
    sx = __ldcg(reinterpret_cast<const float*>(lp + 136LL * nv) + v);
  }
};
template <int R, int RPRE, bool CG>
__global__ void __launch_bounds__(64) kPH(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  __shared__ float red[2 * R];
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
  row_ptrs<R>(W, rb, row0, rows, rp);
  float acc[R][1];
  if (CG) {
    gemvq_split_rows<QW4P, QXPCG, R, RPRE>(rp, cols, XQ, acc);
  } else {
    gemvq_split_rows<QW4P, QXP, R, RPRE>(rp, cols, XQ, acc);
  }
  gemv_rows_store<R, 1>(acc, red, 2, R, GLU_PLAIN, row0, rows, Y);
}

// kMixS (mode qkv6, ninth session): the q/k/v launch of a layer with a
// Q6_K v in gemvq_ps6_1's form: the Q6KA v first, RV rows a block of 2
// warps (unit u a lane, PREV rows loaded before the wait, x right after
// it, then the rest), then q and k in gemvq_ps6_1's blocks (6 rows, 4
// before the wait; gemvq_ps_body with blockIdx.x past v's blocks); RV 6,
// PREV 4 is gemvq_mixed_s_1.
template <int RV, int PREV>
__global__ void __launch_bounds__(64) kMixS(const uint8_t* W0, long long rb0, float* Y0, int rows0, const uint8_t* W1,
                                            long long rb1, float* Y1, int rows1, const uint8_t* W2, long long rb2,
                                            float* Y2, int rows2, int cols, const uint8_t* XQ) {
  const int g6 = (rows2 + RV - 1) / RV;
  if ((int)blockIdx.x < g6) {
    gemvq_q6ka_ps_body<RV, PREV>(W2, rb2, Y2, rows2, cols, XQ, blockIdx.x);
  } else {
    gemvq_ps_body<6, 4>(W0, rb0, Y0, rows0, W1, rb1, Y1, rows1, nullptr, 0, nullptr, 0, cols, XQ, blockIdx.x - g6);
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
  gSoa = argc > 1 && (strcmp(argv[1], "soa") == 0 || strcmp(argv[1], "prof") == 0 || strcmp(argv[1], "x6") == 0 || strcmp(argv[1], "parts") == 0 || strcmp(argv[1], "l2") == 0 || strcmp(argv[1], "q6t") == 0 || strcmp(argv[1], "dchain") == 0 || strcmp(argv[1], "dchain6") == 0 || strcmp(argv[1], "qkv6") == 0 || strcmp(argv[1], "sk") == 0 || strcmp(argv[1], "ca") == 0);
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); SMS = p.multiProcessorCount;
  printf("%s SMs %d L2 %d MB smem/SM %zu KB\n", p.name, SMS, p.l2CacheSize >> 20, p.sharedMemPerMultiprocessor >> 10);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (bool q6 : {false, true}) for (int R : {1, 2, 4, 8}) for (int CH : {1, 2, 4}) setSmem(stagedFn(q6, R, CH));
  setSmem((KFn)gemvq_q6k_s_1);
  size_t big = 1ull << 30; void *da, *db; CK(cudaMalloc(&da, big)); CK(cudaMalloc(&db, big));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  CK(cudaMemcpyAsync(db, da, big, cudaMemcpyDeviceToDevice, s));
  cudaEventRecord(a, s); for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(db, da, big, cudaMemcpyDeviceToDevice, s)); cudaEventRecord(b, s);
  CK(cudaEventSynchronize(b)); float ms; cudaEventElapsedTime(&ms, a, b);
  const double d2d = 2.0 * big * 10 / (ms * 1e-3) / 1e9;
  printf("D2D %.0f GB/s (read+write)\n", d2d);
  CK(cudaFree(da)); CK(cudaFree(db));
  float* gX; CK(cudaMalloc(&gX, 4 * 14336)); CK(cudaMalloc(&gOut, 64));
  CK(cudaMalloc(&gP, 4 << 22)); CK(cudaMalloc(&gCnt, 4 << 18)); CK(cudaMemset(gCnt, 0, 4 << 18));
  fillx<<<64, 256>>>(gX, 14336);
  const int xc[2] = {4096, 14336};
  for (int i = 0; i < 2; i++) {
    CK(cudaMalloc(&gXQ[i], gemvq_bytes(xc[i])));
    gemvq_x<<<(xc[i] / 64 + 7) / 8, 256>>>(gX, xc[i], 1, gXQ[i]);
    CK(cudaMalloc(&gXT[i], 140 * (xc[i] / 64)));
    xtrans<<<(9 * (xc[i] / 64) + 255) / 256, 256>>>(gXQ[i], xc[i], gXT[i]);
    CK(cudaMalloc(&gXT32[i], 76 * (xc[i] / 32)));
    xtrans32<<<(xc[i] / 32 + 255) / 256, 256>>>(gXQ[i], xc[i], gXT32[i]);
    CK(cudaMalloc(&gXT6[i], 152 * (xc[i] / 64)));
    xtrans6<<<(xc[i] / 64 + 255) / 256, 256>>>(gXQ[i], xc[i], gXT6[i]);
  }
  gXf = gX;
  CK(cudaMalloc(&gXQd, gemvq_bytes(14336)));
  gNFlags = 4096;
  CK(cudaMalloc(&gFlags, 4 * gNFlags));
  CK(cudaMemset(gFlags, 0, 4 * gNFlags));
  CK(cudaDeviceSynchronize());
  struct Shape { const char* name; int rows, cols; bool q6; int n; bool glu; };
  Shape shapes[] = {{"qkv4 6144x4096", 6144, 4096, false, 32}, {"o 4096x4096", 4096, 4096, false, 32},
                    {"gate+up 28672x4096", 28672, 4096, false, 32}, {"glu 2x14336x4096", 14336, 4096, false, 32, true}, {"down4 4096x14336", 4096, 14336, false, 32},
                    {"down6 4096x14336", 4096, 14336, true, 32}, {"v6 1024x4096", 1024, 4096, true, 32},
                    {"out6 128256x4096", 128256, 4096, true, 2}};
  const int NS = sizeof(shapes) / sizeof(shapes[0]);
  std::vector<Mat> mats[NS];
  double bytes[NS];
  uint32_t seed = 1;
  // ARENA=1: the matrices of shapes 0..5 (q/k/v, o, gate+up, glu, down4,
  // down6) carved from one allocation in layer order, 256-byte aligned, as
  // engine/cuda's weight arena places a layer's tensors.
  const bool arena = getenv("ARENA") && strcmp(getenv("ARENA"), "1") == 0;
  uint8_t* abase = nullptr; size_t aoff = 0, atotal = 0;
  if (arena) {
    for (int k = 0; k < 6; k++) {
      const size_t rb = (size_t)shapes[k].cols / 256 * (shapes[k].q6 ? 210 : 144);
      atotal += (size_t)shapes[k].n * (((rb * shapes[k].rows + 255) & ~(size_t)255) * (shapes[k].glu ? 2 : 1));
    }
    CK(cudaMalloc(&abase, atotal));
    printf("arena: %zu MB, shapes 0..5 in layer order\n", atotal >> 20);
  }
  auto carve = [&](size_t n) { uint8_t* p = abase + aoff; aoff += (n + 255) & ~(size_t)255; return p; };
  for (int L = 0; arena && L < 32; L++)
    for (int k = 0; k < 6; k++) {
      Mat m; m.rows = shapes[k].rows; m.cols = shapes[k].cols; m.q6 = shapes[k].q6;
      m.rb = (long long)m.cols / 256 * (m.q6 ? 210 : 144);
      const size_t n = m.rb * m.rows;
      m.w = carve(n); CK(cudaMalloc(&m.y, 4 * m.rows));
      fill<<<1024, 256>>>(m.w, n, seed++);
      if (m.q6) fixhdr<<<1024, 256>>>(m.w, n / 210, 210, 208, 1);
      if (m.q6 && gSoa) {
        CK(cudaMalloc(&m.w6s, n));
        CK(cudaMemcpy(m.w6s, m.w, n, cudaMemcpyDeviceToDevice));
        q6ka_relay<<<(unsigned)((n / 210 + 255) / 256), 256>>>(m.w6s, (long long)(n / 210));
      }
      else fixhdr<<<1024, 256>>>(m.w, n / 144, 144, 0, 2);
      if (shapes[k].glu) {
        m.w1 = carve(n);
        fill<<<1024, 256>>>(m.w1, n, seed++);
        fixhdr<<<1024, 256>>>(m.w1, n / 144, 144, 0, 2);
      }
      mats[k].push_back(m);
    }
  for (int k = 0; k < NS; k++) {
    bytes[k] = 0;
    if (arena && k < 6) {
      for (auto& m : mats[k]) bytes[k] += (m.w1 ? 2.0 : 1.0) * m.rb * m.rows;
      continue;
    }
    const int nm = shapes[k].rows == 1024 ? 64 : shapes[k].n;  // v6: enough copies to leave L2
    for (int L = 0; L < nm; L++) {
      Mat m; m.rows = shapes[k].rows; m.cols = shapes[k].cols; m.q6 = shapes[k].q6;
      m.rb = (long long)m.cols / 256 * (m.q6 ? 210 : 144);
      size_t n = m.rb * m.rows; CK(cudaMalloc(&m.w, n)); CK(cudaMalloc(&m.y, 4 * m.rows));
      fill<<<1024, 256>>>(m.w, n, seed++);
      if (shapes[k].glu) {
        CK(cudaMalloc(&m.w1, n));
        fill<<<1024, 256>>>(m.w1, n, seed++);
        fixhdr<<<1024, 256>>>(m.w1, n / 144, 144, 0, 2);
      }
      if (m.q6) fixhdr<<<1024, 256>>>(m.w, n / 210, 210, 208, 1);
      if (m.q6 && gSoa) {
        CK(cudaMalloc(&m.w6s, n));
        CK(cudaMemcpy(m.w6s, m.w, n, cudaMemcpyDeviceToDevice));
        q6ka_relay<<<(unsigned)((n / 210 + 255) / 256), 256>>>(m.w6s, (long long)(n / 210));
      }
      else fixhdr<<<1024, 256>>>(m.w, n / 144, 144, 0, 2);
      m.flag = gFlags + (k * 64 + L) % gNFlags;
      mats[k].push_back(m); bytes[k] += m.w1 ? 2 * n : n;
    }
    shapes[k].n = nm;
  }
  if (getenv("KUT"))  // q4perm'd copies of the Q4_K matrices for kUT's PERM variant
    for (int k = 0; k < 5; k++)
      for (auto& m : mats[k]) {
        const size_t n = m.rb * m.rows;
        CK(cudaMalloc(&m.wp, n));
        CK(cudaMemcpy(m.wp, m.w, n, cudaMemcpyDeviceToDevice));
        q4perm<<<(unsigned)((n / 144 + 255) / 256), 256>>>(m.wp, (long long)(n / 144));
        if (m.w1) {
          CK(cudaMalloc(&m.w1p, n));
          CK(cudaMemcpy(m.w1p, m.w1, n, cudaMemcpyDeviceToDevice));
          q4perm<<<(unsigned)((n / 144 + 255) / 256), 256>>>(m.w1p, (long long)(n / 144));
        }
      }
  CK(cudaDeviceSynchronize());
  std::vector<Var> vars = {{0, 0, 0, 0}, {1, 0, 0, 0}, {3, 0, 0, 0}};
  if (quick) { for (int CH : {1, 2}) for (int w : {1, 2, 4}) vars.push_back({2, 4, CH, w}); }
  else if (argc > 1 && strcmp(argv[1], "ring") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {2, 4, 2, 1}, {2, 4, 2, 4}};
    for (int R : {2, 4}) for (int NS : {2, 3, 4}) for (int C : {8, 16}) for (int w : {1, 2, 4}) vars.push_back({7, R, NS * 100 + C, w});
  }
  else if (argc > 1 && strcmp(argv[1], "parts") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {2, 4, 2, 4}, {5, 4, 21, 2}};
    for (int w : {1, 2, 4}) vars.push_back({9, 4, 2, w});
    vars.push_back({1, 0, 0, 0});
    for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {2, 4, 8}) vars.push_back({10, R, un, w});
    for (int sum : {0, 1}) {
      for (int S : {2, 7}) for (int L : {0, 1}) for (int w : {1, 2}) { Var v{8, 4, S * 10 + L, w}; v.pfmb = sum; vars.push_back(v); }
      for (int S : {2, 4, 7}) for (int un : {1, 2}) for (int w : {1, 2, 4}) { Var v{8, 4, S * 10 + un, w}; v.pfmb = sum; vars.push_back(v); }
      for (int S : {2, 4}) for (int w : {1, 2}) { Var v{8, 2, S * 10 + 2, w}; v.pfmb = sum; vars.push_back(v); }
    }
  }
  else if (argc > 1 && strcmp(argv[1], "q6t") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {10, 4, 1, 8}, {10, 4, 2, 1}, {10, 4, 1, 2}};
    for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) vars.push_back({27, R, un, w});
  }
  else if (argc > 1 && strcmp(argv[1], "xt32") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {5, 4, 21, 2}, {24, 4, 1, 2}, {24, 2, 2, 1}};
    for (int R : {2, 4, 8}) for (int un : {1, 2}) for (int w : {1, 2, 4}) if (!(R == 8 && un == 2)) vars.push_back({26, R, un, w});
  }
  else if (argc > 1 && strcmp(argv[1], "unit64") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {5, 4, 21, 2}};
    for (int l1 : {0, 10}) for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) {
      if (getenv("KUT") && l1) continue;
      vars.push_back({getenv("KUT") ? 24 : 23, R, un + l1, w});
      if (getenv("KUT") && w <= 4) vars.push_back({25, R, un, w});
    }
  }
  else if (argc > 1 && strcmp(argv[1], "warp") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {5, 4, 21, 2}};
    for (int R : {2, 4, 8}) for (int un : {1, 2}) for (int gpw : {1, 2, 4}) for (int w : {2, 4}) {
      if (R == 8 && un == 2) continue;
      vars.push_back({21, R, un + 10 * gpw, w});
    }
    vars.push_back({21, 2, 4, 2}); vars.push_back({21, 2, 4, 4});
  }
  else if (argc > 1 && strcmp(argv[1], "xpre") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}};
    for (int w : {2, 4}) { vars.push_back({5, 4, 11, w}); vars.push_back({5, 4, 21, w}); vars.push_back({5, 8, 11, w}); vars.push_back({5, 2, 11, w}); }
    for (int w : {1, 2, 4, 8}) { vars.push_back({20, 4, 1, w}); vars.push_back({20, 4, 2, w}); vars.push_back({20, 8, 1, w}); vars.push_back({20, 2, 1, w}); vars.push_back({20, 2, 2, w}); }
  }
  else if (argc > 1 && strcmp(argv[1], "ring4") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {5, 4, 21, 2}, {5, 4, 11, 2}};
    for (int d : {1, 2, 3, 4}) for (int w : {1, 2, 4, 8}) vars.push_back({19, 4, d, w});
    for (int d : {2, 4, 6}) for (int w : {1, 2, 4}) vars.push_back({19, 2, d, w});
    for (int w : {1, 2}) vars.push_back({19, 4, 6, w});
  }
  else if (argc > 1 && strcmp(argv[1], "gq") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {18, 0, 0, 0}};
    for (int opw : {4, 8, 16}) for (int un : {1, 2}) vars.push_back({17, opw, un, 0});
  }
  else if (argc > 1 && strcmp(argv[1], "x6") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}};
    for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) vars.push_back({10, R, un, w});
    for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) vars.push_back({16, R, un, w});
    for (int w : {1, 2, 4, 8}) vars.push_back({16, 8, 1, w});
  }
  else if (argc > 1 && strcmp(argv[1], "l2") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}};
    for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) { vars.push_back({10, R, un, w}); vars.push_back({12, R, un, w}); }
    for (int R : {2, 4, 8}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) for (int pf : {0, 1}) vars.push_back({13, R, pf * 10 + un, w});
  }
  else if (argc > 1 && strcmp(argv[1], "soa") == 0) {
    vars = {{0, 0, 0, 0}, {1, 0, 0, 0}, {3, 0, 0, 0}};
    for (int R : {1, 2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) vars.push_back({10, R, un, w});
    for (int qx : {0, 1}) {
      for (int un : {1, 2}) for (int w : {2, 4}) vars.push_back({11, 4, qx * 10 + un, w});
      for (int un : {1, 2}) for (int w : {2, 4, 8}) vars.push_back({11, 2, qx * 10 + un, w});
    }
  }
  else if (argc > 1 && strcmp(argv[1], "base") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {2, 4, 2, 1}, {2, 4, 2, 4}, {5, 4, 21, 2}};
  }
  else if (argc > 1 && strcmp(argv[1], "k6") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {2, 4, 2, 1}, {2, 4, 2, 2}, {2, 4, 2, 4}};
    for (int R : {1, 2, 4}) for (int un : {1, 2}) for (int w : {1, 2, 4, 8}) if (!(R == 1 && un == 1)) vars.push_back({6, R, un, w});
    for (int w : {2, 4}) { vars.push_back({5, 4, 21, w}); vars.push_back({5, 8, 11, w}); }
  }
  else if (argc > 1 && strcmp(argv[1], "kr") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}};
    for (int R : {2, 4, 8}) for (int un : {1, 2}) for (int w : {2, 4, 8}) vars.push_back({5, R, un * 10 + 1, w});
    for (int w : {2, 4, 8}) { vars.push_back({5, 4, 12, w}); vars.push_back({5, 4, 14, w}); vars.push_back({5, 2, 12, w}); vars.push_back({5, 8, 12, w}); vars.push_back({5, 4, 22, w}); }
  }
  else if (argc > 1 && strcmp(argv[1], "pf") == 0) {
    vars = {{0, 0, 0, 0}, {3, 0, 0, 0}, {4, 0, 0, 0}, {4, 1, 0, 0}};
    for (int db : {0, 1}) for (int pf : {1, 2}) for (int mb : {2, 4, 8, 16}) for (int tail : {16, 64, 256}) {
      Var v{4, db, pf, 0}; v.pfmb = mb; v.tail = tail; vars.push_back(v);
    }
  }
  else for (int R : {1, 2, 4, 8}) for (int CH : {1, 2, 4}) for (int w : {1, 2, 4, 8}) vars.push_back({2, R, CH, w});
  // mode layer: 32 layers of q/k/v (qkv4), o, gate/up (glu) and down
  // (down4) in one graph, the step's kernels (gemvq_fused_1, the u2 one
  // for o and down, x already quantized), optionally with a side stream
  // that, as each layer starts, prefetches o's weights (po) and the first
  // gmb MB of gate and up into L2 (l2pf, g blocks of 128 threads, el =
  // evict_last) while q/k/v and o leave DRAM partly idle; "read-only"
  // replaces every GEMV by rd over its bytes.
  // mode prof: one launch each of the kernels to profile (ncu -k regex:k6R|kR):
  // soa6 R4 un1 w8 and R4 un2 w1 on down6, R4 un1 w2 on out6, kR R4 un2
  // w2 on down4.
  if (argc > 1 && strcmp(argv[1], "prof") == 0) {
    // PROF=q4: the Q4_K kernels as the step runs them instead: gemvq_fused_1
    // on gate/up (GLU) and on q/k/v-shaped, kR u2 on down4 and o.
    const bool q4 = getenv("PROF") && strcmp(getenv("PROF"), "q4") == 0;
    const Var pv[] = {{10, 4, 1, 8}, {10, 4, 2, 1}, {10, 4, 1, 2}, {5, 4, 21, 2}};
    const int pk[] = {5, 5, 7, 4};
    const Var qv[] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {5, 4, 21, 2}, {5, 4, 21, 2}};
    const int qk[] = {3, 0, 4, 1};
    for (int i = 0; i < 4; i++) {
      enqueue(q4 ? qv[i] : pv[i], mats[q4 ? qk[i] : pk[i]][0], s);
      CK(cudaStreamSynchronize(s));
    }
    printf("prof: done\n");
    return 0;
  }
  // mode mlp: 32 layers of gate/up + down (Q4_K, x of gate/up already
  // quantized) as the step launches them (gate/up, gemvq_x, down's u2
  // kernel) against kmlp, one persistent launch a layer.
  if (argc > 1 && strcmp(argv[1], "mlp") == 0) {
    float* H; CK(cudaMalloc(&H, 4 * 14336));
    int* bars; CK(cudaMalloc(&bars, 4 * 64));
    const int G = 2 * SMS;
    double lb = 0;
    for (int k : {3, 4}) lb += bytes[k] / shapes[k].n;
    // correctness: kmlp's Y against the three launches' on layer 0
    {
      const Mat &gu = mats[3][0], &dn = mats[4][0];
      std::vector<float> y0(4096), y1(4096);
      enqueue(Var{18, 0, 0, 0}, gu, s);
      launchS(kR<4, 2, 1>, 1024, 64, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)gXQd, gP, gCnt);
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(y0.data(), dn.y, 4 * 4096, cudaMemcpyDeviceToHost));
      for (int un : {2, 4}) {
        CK(cudaMemset(bars, 0, 4 * 64)); CK(cudaMemset(dn.y, 0xff, 4 * 4096));
        if (un == 2) launchS(kmlp<2>, G, 256, 0, s, (const uint8_t*)gu.w, (const uint8_t*)gu.w1, gu.rb, 14336, 4096, (const uint8_t*)gXQ[0], H, gXQd, (const uint8_t*)dn.w, dn.rb, dn.y, bars);
        else launchS(kmlp<4>, G, 256, 0, s, (const uint8_t*)gu.w, (const uint8_t*)gu.w1, gu.rb, 14336, 4096, (const uint8_t*)gXQ[0], H, gXQd, (const uint8_t*)dn.w, dn.rb, dn.y, bars);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(y1.data(), dn.y, 4 * 4096, cudaMemcpyDeviceToHost));
        double e = 0, n2 = 0;
        for (int i = 0; i < 4096; i++) { e += (y1[i] - y0[i]) * (double)(y1[i] - y0[i]); n2 += y0[i] * (double)y0[i]; }
        printf("check mlp un%d: nmse %.3g\n", un, e / n2);
      }
    }
    for (int variant = 0; variant < 3; variant++) {
      const double per = chainBest(s, 32, [&](int L) {
        if (variant && L == 0) CK(cudaMemsetAsync(bars, 0, 4 * 64, s));
        const Mat &gu = mats[3][L], &dn = mats[4][L];
        if (variant == 0) {
          enqueue(Var{18, 0, 0, 0}, gu, s);
          launchS(kR<4, 2, 1>, 1024, 64, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)gXQd, gP, gCnt);
        } else if (variant == 1) {
          launchS(kmlp<2>, G, 256, 0, s, (const uint8_t*)gu.w, (const uint8_t*)gu.w1, gu.rb, 14336, 4096, (const uint8_t*)gXQ[0], H, gXQd, (const uint8_t*)dn.w, dn.rb, dn.y, bars + 2 * L);
        } else {
          launchS(kmlp<4>, G, 256, 0, s, (const uint8_t*)gu.w, (const uint8_t*)gu.w1, gu.rb, 14336, 4096, (const uint8_t*)gXQ[0], H, gXQd, (const uint8_t*)dn.w, dn.rb, dn.y, bars + 2 * L);
        }
      });
      printf("%-34s %7.2f us per layer, %.3f of D2D\n", variant == 0 ? "gate/up, gemvq_x, down (the step)" : (variant == 1 ? "kmlp un2" : "kmlp un4"), per * 1e6, lb / per / 1e9 / d2d);
      fflush(stdout);
    }
    return 0;
  }
  // mode dchain: the engine's "down alone" chain, 32 layers of down
  // alternating Q4_K (the u2 kernel) and Q6KA (k6R<4, 1, true>, 8 warps:
  // gemvq_q6ka_1) as engine/cuda's 8b model has them, each after gemvq_x
  // of its float x (the step) or with x held; and each half alone.
  if (argc > 1 && strcmp(argv[1], "dchain") == 0) {
    uint8_t* xq14 = gXQ[1];
    for (int variant = 0; variant < 6; variant++) {
      const bool withx = variant % 2 == 0;
      const int which = variant / 2;  // 0 both, 1 Q4_K only, 2 Q6KA only
      double lb = 0;
      const double per = chainBest(s, 32, [&](int L) {
        const bool q6 = which == 2 || (which == 0 && L % 2 == 1);
        const Mat& dn = q6 ? mats[5][L] : mats[4][L];
        if (withx) {  // XB = threads a block of gemvq_x (one warp a 64-block; 256 as kernels launches it)
          const int xb = getenv("XB") ? atoi(getenv("XB")) : 256;
          launchS(gemvq_x, (14336 / 64 * 32 + xb - 1) / xb, xb, 0, s, (const float*)gXf, 14336, 1, xq14);
        }
        if (q6) launchS((KFn)k6R<4, 1, true>, 1024, 256, 0, s, (const uint8_t*)dn.w6s, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
        else launchS(kR<4, 2, 1>, 1024, 64, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14, gP, gCnt);
        lb += (double)dn.rb * dn.rows;
      });
      printf("down %-10s %-8s %7.2f us per launch, %.3f of D2D\n", which == 0 ? "Q4+Q6KA" : (which == 1 ? "Q4_K" : "Q6KA"), withx ? "+x" : "x held", per * 1e6, lb / 32 / per / 1e9 / d2d);
      fflush(stdout);
    }
    return 0;
  }
  // mode qkv6: the q/k/v launch of the 16 layers whose v is Q6_K (q
  // 4096x4096 and k 1024x4096 Q4_K: rows of the qkv4 matrices; v 1024x4096
  // Q6KA), 32 layers back to back, x held: gemvq_mixed_a_1 (the engine's
  // one launch, whose Q4_K rows run at the Q6KA path's registers) against
  // two launches (gemvq_fused_1 for q and k, then v by gemvq_q6ka_1 as the
  // engine sizes it, or by k6R<2, 2, true> in one wave of one-warp blocks,
  // or v first), and all-Q4_K q/k/v for reference (sixth session;
  // -qkv6.txt); seventh: gemvq_mixed_1 on the plain Q6_K v (73 registers)
  // and kMixA<1>.
  if (argc > 1 && strcmp(argv[1], "qkv6") == 0) {
    const uint8_t* xq = gXQ[0];
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    float *yq, *yk, *yv;
    CK(cudaMalloc(&yq, 4 * 4096)); CK(cudaMalloc(&yk, 4 * 1024)); CK(cudaMalloc(&yv, 4 * 1024));
    const double lb6 = 5120.0 * mats[0][0].rb + (double)mats[6][0].rb * 1024, lb4 = 6144.0 * mats[0][0].rb;
    auto line = [&](const char* name, double lb, auto layer) {  // layer(q/k, v) enqueues one layer's launches
      const double per = chainBest(s, 32, [&](int L) { layer(mats[0][L], mats[6][L]); });
      printf("%-34s %7.2f us a layer, %.3f of D2D\n", name, per * 1e6, lb / per / 1e9 / d2d);
      fflush(stdout);
    };
    // One mixed launch: q and k (the q/k/v matrix's first 5120 rows, Q4_K)
    // and the Q6_K v in g6 blocks, v re-laid (Q6KA) unless plain6.
    struct QV { const char* name; KFn6 f; int g6; bool plain6; };
    const QV mixed[] = {{"gemvq_mixed_a_1", gemvq_mixed_a_1, 512, false},
                        {"gemvq_mixed_1 (v plain Q6_K)", gemvq_mixed_1, 512, true},
                        {"kMixA<1> (Q6KA v, 1 row a block)", kMixA<1>, 1024, false},
                        {"kMixAL<2, 14> (73 registers)", kMixAL<2, 14, false>, 512, false},
                        {"kMixAL<1, 14>", kMixAL<1, 14, false>, 1024, false},
                        {"kMixAL<2, 12> (85 registers)", kMixAL<2, 12, false>, 512, false},
                        {"kMixAL<1, 14> Q4_K first", kMixAL<1, 14, true>, 1024, false},
                        {"kMixAL<1, 10> Q4_K first", kMixAL<1, 10, true>, 1024, false}};
    {  // kMixS: v in RV-row blocks, then q and k in 6-row ones (854 blocks)
      struct MS { const char* name; KFn6 f; int g6; };
      const MS ms[] = {{"kMixS RV6 pre4", kMixS<6, 4>, 171}, {"kMixS RV6 pre6", kMixS<6, 6>, 171},
                       {"kMixS RV6 pre3", kMixS<6, 3>, 171}, {"kMixS RV4 pre3", kMixS<4, 3>, 256},
                       {"kMixS RV5 pre4", kMixS<5, 4>, 205}, {"kMixS RV2 pre2", kMixS<2, 2>, 512}};
      for (const MS& v : ms)
        line(v.name, lb6, [&](const Mat& qk, const Mat& v6) {
          launchS(v.f, 854 + v.g6, 64, 0, s, (const uint8_t*)qk.w, qk.rb, yq, 4096, (const uint8_t*)qk.w + 4096 * qk.rb, qk.rb, yk, 1024,
                  (const uint8_t*)v6.w6s, v6.rb, yv, 1024, 4096, xq);
        });
      line("gemvq_ps6_1, q and k alone (854 blocks)", 5120.0 * mats[0][0].rb, [&](const Mat& qk, const Mat&) {
        launchS(gemvq_ps6_1, 854, 64, 0, s, (const uint8_t*)qk.w, qk.rb, yq, 4096, (const uint8_t*)qk.w + 4096 * qk.rb, qk.rb, yk, 1024,
                z, 0LL, zy, 0, 4096, xq);
      });
    }
    for (const QV& v : mixed)
      line(v.name, lb6, [&](const Mat& qk, const Mat& v6) {
        launchS(v.f, 1280 + v.g6, 64, 0, s, (const uint8_t*)qk.w, qk.rb, yq, 4096, (const uint8_t*)qk.w + 4096 * qk.rb, qk.rb, yk, 1024,
                (const uint8_t*)(v.plain6 ? v6.w : v6.w6s), v6.rb, yv, 1024, 4096, xq);
      });
    // Two launches: q and k by gemvq_fused_1, v by gemvq_q6ka_1 as the engine
    // sizes it (after or before) or by k6R<2, 2, true> in one wave.
    auto qk2 = [&](const Mat& qk) {
      launchS(gemvq_fused_1, 1280, 64, 0, s, (const uint8_t*)qk.w, qk.rb, yq, 4096, (const uint8_t*)qk.w + 4096 * qk.rb, qk.rb, yk, 1024, z, 0LL, zy, 0, 4096, xq, (int)GLU_PLAIN);
    };
    auto v6a = [&](const Mat& v6) { launchS((KFn)gemvq_q6ka_1, 256, 64, 0, s, (const uint8_t*)v6.w6s, v6.rb, yv, 1024, 4096, xq); };
    line("fused_1(q,k) + q6ka_1(v)", lb6, [&](const Mat& qk, const Mat& v6) { qk2(qk); v6a(v6); });
    line("q6ka_1(v) + fused_1(q,k)", lb6, [&](const Mat& qk, const Mat& v6) { v6a(v6); qk2(qk); });
    line("fused_1(q,k) + k6R R2 un2 w1(v)", lb6, [&](const Mat& qk, const Mat& v6) {
      qk2(qk);
      launchS((KFn)k6R<2, 2, true>, 512, 32, 0, s, (const uint8_t*)v6.w6s, v6.rb, yv, 1024, 4096, xq);
    });
    line("all Q4_K: fused_1(q,k,v4)", lb4, [&](const Mat& qk, const Mat&) {
      launchS(gemvq_fused_1, 1536, 64, 0, s, (const uint8_t*)qk.w, qk.rb, yq, 4096, (const uint8_t*)qk.w + 4096 * qk.rb, qk.rb, yk, 1024,
              (const uint8_t*)qk.w + 5120 * qk.rb, qk.rb, yv, 1024, 4096, xq, (int)GLU_PLAIN);
    });
    return 0;
  }
  // mode tc: kTC (tensor-core dot products) against the step's kernel for
  // q/k/v (all Q4_K), o, gate/up (GLU) and down4, 32 launches back to back,
  // x held; first each variant's output against the step kernel's.
  if (argc > 1 && strcmp(argv[1], "tc") == 0) {
    // x_int in [-32639, 32639] (both bytes of the signed split fit s8),
    // written on the host into L0, LP (the step kernels' layouts) and LM.
    uint8_t *xlm[2], *xlm2[2];
    for (int i = 0; i < 2; i++) {
      const int cols = xc[i], nv = cols / 64;
      std::vector<int> xi(cols);
      std::vector<float> sx(nv);
      uint32_t h = 12345 + i;
      for (int e = 0; e < cols; e++) {
        h = h * 1664525u + 1013904223u;
        const int mag = (h >> 8) % 4 == 0 ? 32639 : 8000;  // some blocks use the whole range
        xi[e] = (int)((h >> 9) % (2 * mag + 1)) - mag;
      }
      for (int v = 0; v < nv; v++) sx[v] = 1.0f / 32639.0f * (1.0f + 0.01f * (v % 7));
      std::vector<uint8_t> q(gemvq_bytes(cols), 0), lm(144 * nv, 0), lm2(144 * nv, 0);
      for (int e = 0; e < cols; e++) {
        q[e] = (uint8_t)((xi[e] >> 8) & 0xff);
        q[cols + e] = (uint8_t)(xi[e] & 0xff);
      }
      const long long lp = gemvq_lp(cols);
      for (int v = 0; v < nv; v++) {
        int g16[4] = {0, 0, 0, 0};
        for (int e = 0; e < 64; e++) g16[e / 16] += xi[64 * v + e];
        int* hdr = reinterpret_cast<int*>(&q[2 * cols + 32 * v]);
        memcpy(&hdr[0], &sx[v], 4);
        hdr[4] = g16[0]; hdr[5] = g16[2]; hdr[6] = g16[1]; hdr[7] = g16[3];
        for (int e = 0; e < 64; e++) {
          const int pc = e / 16, j = e % 16, x = xi[64 * v + e];
          q[lp + 16LL * (pc * nv + v) + j] = (uint8_t)((x >> 8) & 0xff);
          q[lp + 16LL * ((4 + pc) * nv + v) + j] = (uint8_t)(x & 0xff);
          const int l = ((x + 128) & 255) - 128, hh = (x - l) >> 8;
          const int half = e / 32, k = e % 32, t = k / 8, b = k % 8;
          lm[128 * v + 16 * t + 8 * half + b] = (uint8_t)(hh & 0xff);
          lm[128 * v + 64 + 16 * t + 8 * half + b] = (uint8_t)(l & 0xff);
          // LM2: element k of a half is byte k % 4 of b0 (k < 16) or b1 of lane (k % 16) / 4.
          const int t2 = (k % 16) / 4, o2 = 8 * half + 4 * (k / 16) + k % 4;
          lm2[128 * v + 16 * t2 + o2] = (uint8_t)(hh & 0xff);
          lm2[128 * v + 64 + 16 * t2 + o2] = (uint8_t)(l & 0xff);
        }
        int* ps = reinterpret_cast<int*>(&q[lp + 128LL * nv + 8 * v]);
        ps[0] = g16[0] + g16[1]; ps[1] = g16[2] + g16[3];
        memcpy(&q[lp + 136LL * nv + 4 * v], &sx[v], 4);
        int* ls = reinterpret_cast<int*>(&lm[128 * nv + 16 * v]);
        ls[0] = ps[0]; ls[1] = ps[1]; memcpy(&ls[2], &sx[v], 4);
        memcpy(&lm2[128 * nv + 16 * v], ls, 16);
      }
      CK(cudaMemcpy(gXQ[i], q.data(), q.size(), cudaMemcpyHostToDevice));
      CK(cudaMalloc(&xlm[i], lm.size()));
      CK(cudaMemcpy(xlm[i], lm.data(), lm.size(), cudaMemcpyHostToDevice));
      CK(cudaMalloc(&xlm2[i], lm2.size()));
      CK(cudaMemcpy(xlm2[i], lm2.data(), lm2.size(), cudaMemcpyHostToDevice));
    }
    typedef void (*TFn)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*);
    struct TV { int W, UN; TFn plain, glu; };
    const TV tvs[] = {{4, 1, kTC<4, 1, false>, kTC<4, 1, true>}, {4, 2, kTC<4, 2, false>, kTC<4, 2, true>},
                      {4, 4, kTC<4, 4, false>, kTC<4, 4, true>}, {8, 1, kTC<8, 1, false>, kTC<8, 1, true>},
                      {8, 2, kTC<8, 2, false>, kTC<8, 2, true>}, {16, 1, kTC<16, 1, false>, kTC<16, 1, true>},
                      {2, 2, kTC<2, 2, false>, kTC<2, 2, true>}, {2, 4, kTC<2, 4, false>, kTC<2, 4, true>},
                      {2, 1, kTC<2, 1, false>, kTC<2, 1, true>}, {1, 2, kTC<1, 2, false>, kTC<1, 2, true>}};
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    for (int k : {1, 0, 3, 4}) {
      if (getenv("SHAPE") && atoi(getenv("SHAPE")) != k) continue;  // one shape (ncu runs)
      const bool glu = k == 3;
      const uint8_t* xq = gXQ[shapes[k].cols == 4096 ? 0 : 1];
      auto base = [&](const Mat& m) {
        if (k == 1) launchS((KFn)gemvq_p4_1, 1024, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
        else if (k == 4) launchS((KFn)gemvq_p2u2_1, 2048, 32, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq);
        else if (k == 0) launchS(gemvq_fused_1, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
        else launchS(gemvq_fused_1, (m.rows + 1) / 2, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, (const uint8_t*)m.w1, m.rb, zy, m.rows, z, 0LL, zy, 0, m.cols, xq, (int)GLU_SWIGLU);
      };
      const Mat& m0 = mats[k][0];
      const std::vector<float> y0 = runOnce(s, m0.y, m0.rows, 0xff, [&] { base(m0); });
      const double ymax = maxAbs(y0);
      double lb = 0;
      for (auto& m : mats[k]) lb += (m.w1 ? 2.0 : 1.0) * m.rb * m.rows;
      lb /= mats[k].size();
      auto chain = [&](auto launch) { return chainBest(s, 32, [&](int L) { launch(mats[k][L % mats[k].size()]); }); };
      // A variant's line: its output against the step kernel's, then its chain.
      auto line = [&](const char* what, auto launch) {
        const double e = maxAbs(runOnce(s, m0.y, m0.rows, 0xff, [&] { launch(m0); }), &y0), t = chain(launch);
        printf("%-20s %-18s %7.2f us, %.3f of D2D  (max |dy| %.2e of max |y| %.2e)\n", shapes[k].name, what, t * 1e6, lb / t / 1e9 / d2d, e, ymax);
        fflush(stdout);
      };
      const double tb = chain(base);
      printf("%-20s step kernel        %7.2f us, %.3f of D2D\n", shapes[k].name, tb * 1e6, lb / tb / 1e9 / d2d);
      char name[32];
      for (const TV& v : tvs) {
        const int per = glu ? 8 : 16, blocks = (m0.rows + per - 1) / per;
        if ((m0.cols / 256) % (v.W * v.UN) != 0 || (getenv("TS") && v.W != 8)) continue;
        snprintf(name, sizeof name, "kTC W%-2d UN%d", v.W, v.UN);
        line(name, [&](const Mat& m) {
          launchS(glu ? v.glu : v.plain, blocks, 32 * v.W, 0, s, (const uint8_t*)m.w, (const uint8_t*)(glu ? m.w1 : m.w), m.rb, m.y, m.rows, m.cols, (const uint8_t*)xlm[m.cols == 4096 ? 0 : 1]);
        });
      }
      struct SV { int W, ST; TFn plain, glu; };
      const SV svs[] = {{4, 2, kTS<4, 2, false>, kTS<4, 2, true>}, {4, 4, kTS<4, 4, false>, kTS<4, 4, true>},
                        {8, 2, kTS<8, 2, false>, kTS<8, 2, true>}, {2, 4, kTS<2, 4, false>, kTS<2, 4, true>},
                        {2, 8, kTS<2, 8, false>, kTS<2, 8, true>}, {8, 4, kTS<8, 4, false>, kTS<8, 4, true>},
                        {4, 8, kTS<4, 8, false>, kTS<4, 8, true>}};
      for (const SV& v : svs) {
        const int per = glu ? 8 : 16, blocks = (m0.rows + per - 1) / per, smem = v.W * v.ST * 2304;
        if ((m0.cols / 256) % v.W != 0) continue;
        TFn f = glu ? v.glu : v.plain;
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        snprintf(name, sizeof name, "kTS W%-2d ST%d", v.W, v.ST);
        line(name, [&](const Mat& m) {
          launchS(f, blocks, 32 * v.W, smem, s, (const uint8_t*)m.w, (const uint8_t*)(glu ? m.w1 : m.w), m.rb, m.y, m.rows, m.cols, (const uint8_t*)xlm2[m.cols == 4096 ? 0 : 1]);
        });
      }
    }
    return 0;
  }
  // mode cap: kCap against gemvq_fused_1 / _u2_1 for q/k/v (all Q4_K) and
  // the GLU, 32 launches back to back, x held.
  if (argc > 1 && strcmp(argv[1], "cap") == 0) {
    typedef void (*CFn)(const uint8_t*, long long, float*, int, const uint8_t*, long long, float*, int, const uint8_t*,
                        long long, float*, int, int, const uint8_t*, int);
    struct CV { const char* name; CFn f; };
    const CV cvs[] = {{"gemvq_fused_1", gemvq_fused_1}, {"kCap<1, 15>", kCap<1, 15>}, {"kCap<1, 16>", kCap<1, 16>},
                      {"gemvq_fused_u2_1", gemvq_fused_u2_1}, {"kCap<2, 12>", kCap<2, 12>}, {"kCap<2, 10>", kCap<2, 10>},
                      {"kCap<2, 14>", kCap<2, 14>}};
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    for (int k : {0, 3}) {
      const bool glu = k == 3;
      const uint8_t* xq = gXQ[0];
      double lb = 0;
      for (auto& m : mats[k]) lb += (m.w1 ? 2.0 : 1.0) * m.rb * m.rows;
      lb /= mats[k].size();
      for (const CV& v : cvs) {
        const double t = chainBest(s, 32, [&](int L) {
          const Mat& m = mats[k][L % mats[k].size()];
          if (glu) launchS(v.f, (m.rows + 1) / 2, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, (const uint8_t*)m.w1, m.rb, zy, m.rows, z, 0LL, zy, 0, m.cols, xq, (int)GLU_SWIGLU);
          else launchS(v.f, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
        });
        printf("%-20s %-18s %7.2f us, %.3f of D2D\n", shapes[k].name, v.name, t * 1e6, lb / t / 1e9 / d2d);
        fflush(stdout);
      }
    }
    return 0;
  }
  // mode p8: kP geometries for q/k/v (all Q4_K, one matrix of 6144 rows)
  // and o against the step's kernels, 32 launches back to back, x held.
  if (argc > 1 && strcmp(argv[1], "p8") == 0) {
    struct PV { const char* name; KFn f; int R, w; };
    const PV pvs[] = {{"gemvq_p4_1 R4 w2", (KFn)gemvq_p4_1, 4, 2}, {"kP R8 un1 w2", kP<8, 1>, 8, 2},
                      {"kP R8 un2 w1", kP<8, 2>, 8, 1}, {"kP R4 un2 w1", kP<4, 2>, 4, 1}, {"kP R6 un1 w2", kP<6, 1>, 6, 2},
                      {"kP R5 un1 w2", kP<5, 1>, 5, 2}, {"kP R7 un1 w2", kP<7, 1>, 7, 2}, {"kP R6 un2 w1", kP<6, 2>, 6, 1},
                      {"kP R3 un1 w2", kP<3, 1>, 3, 2}, {"kPX R4 w2, x made up (timing only)", kPX<4, 1>, 4, 2},
                      {"kFX R4 w2 (gemvq_fused_1's walk), x made up (timing only)", (KFn)kFX, GEMVQ_R, 2},
                      {"kPB R4 G4 (16 rows, 8 warps, x in shared)", kPB<4, 4>, 16, 8},
                      {"kPB R4 G8 (32 rows, 16 warps, x in shared)", kPB<4, 8>, 32, 16},
                      {"kPB R6 G4 (24 rows, 8 warps, x in shared)", kPB<6, 4>, 24, 8},
                      {"kPB R6 G8 (48 rows, 16 warps, x in shared)", kPB<6, 8>, 48, 16},
                      {"kPB R3 G4 (12 rows, 8 warps, x in shared)", kPB<3, 4>, 12, 8},
                      {"kPB R2 G4 (8 rows, 8 warps, x in shared)", kPB<2, 4>, 8, 8},
                      {"kPB R4 G2 (8 rows, 4 warps, x in shared)", kPB<4, 2>, 8, 4},
                      {"kPB R3 G8 (24 rows, 16 warps, x in shared)", kPB<3, 8>, 24, 16},
                      {"kPH R4 pre4", kPH<4, 4, false>, 4, 2}, {"kPH R4 pre3", kPH<4, 3, false>, 4, 2},
                      {"kPH R4 pre2", kPH<4, 2, false>, 4, 2}, {"kPH R4 pre0", kPH<4, 0, false>, 4, 2},
                      {"kPH R4 pre4 x.cg", kPH<4, 4, true>, 4, 2}, {"kPH R6 pre6", kPH<6, 6, false>, 6, 2},
                      {"kPH R6 pre4", kPH<6, 4, false>, 6, 2}, {"kPH R6 pre3", kPH<6, 3, false>, 6, 2},
                      {"kPH R6 pre5", kPH<6, 5, false>, 6, 2}, {"kPH R5 pre4", kPH<5, 4, false>, 5, 2},
                      {"kPH R5 pre3", kPH<5, 3, false>, 5, 2}, {"kPH R3 pre2", kPH<3, 2, false>, 3, 2},
                      {"kPH R3 pre3", kPH<3, 3, false>, 3, 2}, {"kPH R2 pre2", kPH<2, 2, false>, 2, 2},
                      {"kPH R2 pre1", kPH<2, 1, false>, 2, 2}, {"kPH R4 pre1", kPH<4, 1, false>, 4, 2}};
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    const uint8_t* xq = gXQ[0];
    for (int k : {1, 0, 2}) {
      double lb = 0;
      for (auto& m : mats[k]) lb += m.rb * (double)m.rows;
      lb /= mats[k].size();
      auto chain = [&](auto launch) { return chainBest(s, 32, [&](int L) { launch(mats[k][L % mats[k].size()]); }); };
      auto fused = [&](const Mat& m) {
        launchS(gemvq_fused_1, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
      };
      const Mat& m0 = mats[k][0];
      const std::vector<float> y0 = runOnce(s, m0.y, m0.rows, 0xff, [&] { fused(m0); });
      const double tb = chain(fused);
      printf("%-20s gemvq_fused_1      %7.2f us, %.3f of D2D\n", shapes[k].name, tb * 1e6, lb / tb / 1e9 / d2d);
      for (const PV& v : pvs) {
        auto pl = [&](const Mat& m) { launchS(v.f, (m.rows + v.R - 1) / v.R, 32 * v.w, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
        const double e = maxAbs(runOnce(s, m0.y, m0.rows, 0xff, [&] { pl(m0); }), &y0), t = chain(pl);
        printf("%-20s %-18s %7.2f us, %.3f of D2D  (max |dy| %.2e of %.2e)\n", shapes[k].name, v.name, t * 1e6, lb / t / 1e9 / d2d, e, maxAbs(y0));
        fflush(stdout);
      }
    }
    return 0;
  }
  // mode cachain: kCA8 (GLU) against gemvq_fused_1 (GLU) in chains
  // with its neighbours in the step (o before: gemvq_p4_1; down after: the
  // sliced kSK2), 32 layers from one graph: what the ring costs the
  // launches around it.
  if (argc > 1 && strcmp(argv[1], "cachain") == 0) {
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    const uint8_t* xq = gXQ[0];
    const Mat& g0m = mats[3][0];
    const int smem = 8 * 4 * (int)g0m.rb;
    CK(cudaFuncSetAttribute(kCA8, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kCA8, 256, smem));
    auto o = [&](int L) { const Mat& m = mats[1][L]; launchS((KFn)gemvq_p4_1, m.rows / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
    auto gf = [&](int L) {
      const Mat& m = mats[3][L];
      launchS(gemvq_fused_1, (m.rows + 1) / 2, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, (const uint8_t*)m.w1, m.rb, zy, m.rows, z, 0LL, zy, 0, m.cols, xq, (int)GLU_SWIGLU);
    };
    auto gc = [&](int L) {
      const Mat& m = mats[3][L];
      launchS(kCA8, std::min(per * SMS, m.rows / 4), 256, smem, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq, (int)GLU_SWIGLU);
    };
    auto dn = [&](int L) { const Mat& m = mats[4][L]; launchS(kSK2<256, 4>, 224, 256, 0, s, (const uint8_t*)m.w, m.rb, m.y, 4096, 14336, (const float*)gXf); };
    auto qkv = [&](int L) {
      const Mat& m = mats[0][L];
      launchS(gemvq_fused_1, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
    };
    typedef void (*GF)(const uint8_t*, const uint8_t*, long long, float*, int, int, const uint8_t*, int);
    auto gv = [&](GF f, int R, int S, int NT) {
      const int sm = R * S * (int)g0m.rb;
      CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
      int pv = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&pv, f, NT, sm));
      return [=](int L) {
        const Mat& m = mats[3][L];
        launchS(f, std::min(pv * SMS, m.rows / (R / 2)), NT, sm, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq, (int)GLU_SWIGLU);
      };
    };
    GF fl = kCAG<8, 4, 256, true>, f3 = kCAG<8, 3, 256, false>, f3l = kCAG<8, 3, 256, true>, f2 = kCAG<2, 6, 128, false>,
       f4 = kCAG<4, 4, 128, false>;
    auto late = gv(fl, 8, 4, 256);
    auto s3 = gv(f3, 8, 3, 256);
    auto s3l = gv(f3l, 8, 3, 256);
    auto r2 = gv(f2, 2, 6, 128);
    auto r4 = gv(f4, 4, 4, 128);
    struct Ch { const char* name; std::function<void(int)> f; };
    const Ch chs[] = {{"glu fused", [&](int L) { gf(L); }}, {"glu ring", [&](int L) { gc(L); }},
                      {"o, glu fused", [&](int L) { o(L); gf(L); }}, {"o, glu ring", [&](int L) { o(L); gc(L); }},
                      {"glu fused, down", [&](int L) { gf(L); dn(L); }}, {"glu ring, down", [&](int L) { gc(L); dn(L); }},
                      {"o, glu fused, down", [&](int L) { o(L); gf(L); dn(L); }}, {"o, glu ring, down", [&](int L) { o(L); gc(L); dn(L); }},
                      {"qkv, o, glu fused, down", [&](int L) { qkv(L); o(L); gf(L); dn(L); }},
                      {"qkv, o, glu ring, down", [&](int L) { qkv(L); o(L); gc(L); dn(L); }},
                      {"down", [&](int L) { dn(L); }}, {"o", [&](int L) { o(L); }},
                      {"glu ring late", [&](int L) { late(L); }}, {"o, glu ring late, down", [&](int L) { o(L); late(L); dn(L); }},
                      {"glu ring S3", [&](int L) { s3(L); }}, {"o, glu ring S3, down", [&](int L) { o(L); s3(L); dn(L); }},
                      {"o, glu ring S3 late, down", [&](int L) { o(L); s3l(L); dn(L); }},
                      {"glu ring R2 S6 t128", [&](int L) { r2(L); }}, {"o, glu ring R2 S6 t128, down", [&](int L) { o(L); r2(L); dn(L); }},
                      {"glu ring R4 S4 t128", [&](int L) { r4(L); }}, {"o, glu ring R4 S4 t128, down", [&](int L) { o(L); r4(L); dn(L); }}};
    for (int rep = 0; rep < 2; rep++)
      for (const Ch& c : chs) {
        const double t = chainBest(s, 32, c.f);
        printf("cachain %-26s %7.2f us a layer\n", c.name, t * 1e6);
        fflush(stdout);
      }
    return 0;
  }
  // mode ca: kCA (persistent, cp.async ring) against gemvq_fused_1 and
  // gemvq_p4_1 on gate+up 28672x4096 (plain), 32 launches back to back.
  if (argc > 1 && strcmp(argv[1], "ca") == 0) {
    const uint8_t* z = nullptr;
    float* zy = nullptr;
    const uint8_t* xq = gXQ[0];
    const int k = 2;
    double lb = 0;
    for (auto& m : mats[k]) lb += m.rb * (double)m.rows;
    lb /= mats[k].size();
    auto chain = [&](auto launch) { return chainBest(s, 32, [&](int L) { launch(mats[k][L % mats[k].size()]); }); };
    auto fused = [&](const Mat& m) {
      launchS(gemvq_fused_1, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, z, 0LL, zy, 0, z, 0LL, zy, 0, m.cols, xq, (int)GLU_PLAIN);
    };
    const Mat& m0 = mats[k][0];
    const std::vector<float> y0 = runOnce(s, m0.y, m0.rows, 0xff, [&] { fused(m0); });
    for (int rep = 0; rep < 2; rep++) {
      const double tb = chain(fused);
      printf("%-20s gemvq_fused_1      %7.2f us, %.3f of D2D\n", shapes[k].name, tb * 1e6, lb / tb / 1e9 / d2d);
      auto p4 = [&](const Mat& m) { launchS((KFn)gemvq_p4_1, m.rows / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
      const double tp = chain(p4);
      printf("%-20s gemvq_p4_1         %7.2f us, %.3f of D2D\n", shapes[k].name, tp * 1e6, lb / tp / 1e9 / d2d);
    }
    // kCA8 (gemvq_ca_1 while it was production code) on the step's GLU gate/up
    // against gemvq_fused_1's GLU launch.
    {
      const int kg = 3;
      double lg = 0;
      for (auto& m : mats[kg]) lg += 2.0 * m.rb * m.rows;
      lg /= mats[kg].size();
      auto chg = [&](auto launch) { return chainBest(s, 32, [&](int L) { launch(mats[kg][L % mats[kg].size()]); }); };
      auto fglu = [&](const Mat& m) {
        launchS(gemvq_fused_1, (m.rows + 1) / 2, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, (const uint8_t*)m.w1, m.rb, zy, m.rows, z, 0LL, zy, 0, m.cols, xq, (int)GLU_SWIGLU);
      };
      const Mat& g0m = mats[kg][0];
      const std::vector<float> yg = runOnce(s, g0m.y, g0m.rows, 0xff, [&] { fglu(g0m); });
      const int smem = 8 * 4 * (int)g0m.rb;
      CK(cudaFuncSetAttribute(kCA8, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int per = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kCA8, 256, smem));
      auto cglu = [&](const Mat& m) {
        launchS(kCA8, std::min(per * SMS, m.rows / 4), 256, smem, s, (const uint8_t*)m.w, (const uint8_t*)m.w1, m.rb, m.y, m.rows, m.cols, xq, (int)GLU_SWIGLU);
      };
      const double e = maxAbs(runOnce(s, g0m.y, g0m.rows, 0xff, [&] { cglu(g0m); }), &yg);
      for (int rep = 0; rep < 2; rep++) {
        const double tf = chg(fglu), tc = chg(cglu);
        printf("%-20s gemvq_fused_1 GLU  %7.2f us, %.3f of D2D\n", shapes[kg].name, tf * 1e6, lg / tf / 1e9 / d2d);
        printf("%-20s kCA8 GLU %d/SM %7.2f us, %.3f of D2D  (max |dy| %.2e of %.2e)\n", shapes[kg].name, per, tc * 1e6, lg / tc / 1e9 / d2d, e, maxAbs(yg));
      }
      fflush(stdout);
    }
    // kCA6 on the output projection (Q6KA 128256x4096) against gemvq_q6ka_1 (4 rows a block, 2 warps).
    {
      const int ko = 7;
      double lo = 0;
      for (auto& m : mats[ko]) lo += m.rb * (double)m.rows;
      lo /= mats[ko].size();
      auto cho = [&](auto launch) { return chainBest(s, 4, [&](int L) { launch(mats[ko][L % mats[ko].size()]); }); };
      auto q6 = [&](const Mat& m) { launchS((KFn)gemvq_q6ka_1, (m.rows + 3) / 4, 64, 0, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, xq); };
      const Mat& o0 = mats[ko][0];
      const std::vector<float> yo = runOnce(s, o0.y, o0.rows, 0xff, [&] { q6(o0); });
      const double tq = cho(q6);
      printf("%-20s gemvq_q6ka_1       %7.2f us, %.3f of D2D\n", shapes[ko].name, tq * 1e6, lo / tq / 1e9 / d2d);
      struct C6 { const char* name; KFn f; int R, S, NT; };
      const C6 c6s[] = {{"kCA6 R4 S4 t256", kCA6<4, 4, 256>, 4, 4, 256}, {"kCA6 R8 S3 t256", kCA6<8, 3, 256>, 8, 3, 256},
                        {"kCA6 R4 S3 t128", kCA6<4, 3, 128>, 4, 3, 128}, {"kCA6 R2 S6 t128", kCA6<2, 6, 128>, 2, 6, 128},
                        {"kCA6 R4 S6 t256", kCA6<4, 6, 256>, 4, 6, 256}, {"kCA6 R8 S4 t256", kCA6<8, 4, 256>, 8, 4, 256}};
      for (const C6& v : c6s) {
        const int smem = v.R * (int)o0.rb * v.S;
        CK(cudaFuncSetAttribute(v.f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int per = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, v.f, v.NT, smem));
        if (per < 1) { printf("%s: does not fit\n", v.name); continue; }
        auto pl = [&](const Mat& m) { launchS(v.f, per * SMS, v.NT, smem, s, (const uint8_t*)m.w6s, m.rb, m.y, m.rows, m.cols, xq); };
        const double e = maxAbs(runOnce(s, o0.y, o0.rows, 0xff, [&] { pl(o0); }), &yo), tt = cho(pl);
        printf("%-20s %-16s %d/SM (%d KB) %7.2f us, %.3f of D2D  (max |dy| %.2e of %.2e)\n", shapes[ko].name, v.name, per, smem >> 10, tt * 1e6, lo / tt / 1e9 / d2d, e, maxAbs(yo));
        fflush(stdout);
      }
    }
    // kCA (plain) on q/k/v- and o-shaped launches (one wave in the step) against gemvq_p4_1.
    for (int kk : {0, 1}) {
      double lq = 0;
      for (auto& m : mats[kk]) lq += m.rb * (double)m.rows;
      lq /= mats[kk].size();
      auto chq = [&](auto launch) { return chainBest(s, 32, [&](int L) { launch(mats[kk][L % mats[kk].size()]); }); };
      auto p4 = [&](const Mat& m) { launchS((KFn)gemvq_p4_1, m.rows / 4, 64, 0, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
      const Mat& q0 = mats[kk][0];
      const std::vector<float> yq = runOnce(s, q0.y, q0.rows, 0xff, [&] { p4(q0); });
      const double tp = chq(p4);
      printf("%-20s gemvq_p4_1         %7.2f us, %.3f of D2D\n", shapes[kk].name, tp * 1e6, lq / tp / 1e9 / d2d);
      struct CQ { const char* name; KFn f; int R, S, NT; };
      const CQ cqs[] = {{"kCA R8 S4 t256", kCA<8, 4, 256>, 8, 4, 256}, {"kCA R2 S6 t128", kCA<2, 6, 128>, 2, 6, 128},
                        {"kCA R4 S3 t128", kCA<4, 3, 128>, 4, 3, 128}, {"kCA R2 S3 t128", kCA<2, 3, 128>, 2, 3, 128}};
      for (const CQ& v : cqs) {
        const int smem = v.R * (int)q0.rb * v.S;
        CK(cudaFuncSetAttribute(v.f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int per = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, v.f, v.NT, smem));
        auto pl = [&](const Mat& m) { launchS(v.f, std::min(per * SMS, m.rows / v.R), v.NT, smem, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
        const double e = maxAbs(runOnce(s, q0.y, q0.rows, 0xff, [&] { pl(q0); }), &yq), tt = chq(pl);
        printf("%-20s %-16s %d/SM %7.2f us, %.3f of D2D  (max |dy| %.2e of %.2e)\n", shapes[kk].name, v.name, per, tt * 1e6, lq / tt / 1e9 / d2d, e, maxAbs(yq));
        fflush(stdout);
      }
    }
    struct CV { const char* name; KFn f; int R, S, NT; };
    const CV cvs[] = {{"kCA R4 S3 t128", kCA<4, 3, 128>, 4, 3, 128}, {"kCA R4 S4 t128", kCA<4, 4, 128>, 4, 4, 128},
                      {"kCA R4 S6 t128", kCA<4, 6, 128>, 4, 6, 128}, {"kCA R8 S3 t128", kCA<8, 3, 128>, 8, 3, 128},
                      {"kCA R8 S4 t128", kCA<8, 4, 128>, 8, 4, 128}, {"kCA R8 S4 t256", kCA<8, 4, 256>, 8, 4, 256},
                      {"kCA R4 S4 t256", kCA<4, 4, 256>, 4, 4, 256}, {"kCA R2 S6 t128", kCA<2, 6, 128>, 2, 6, 128},
                      {"kCA R2 S8 t128", kCA<2, 8, 128>, 2, 8, 128}, {"kCA R4 S8 t128", kCA<4, 8, 128>, 4, 8, 128},
                      {"kCA R16 S3 t256", kCA<16, 3, 256>, 16, 3, 256}, {"kCA R8 S6 t256", kCA<8, 6, 256>, 8, 6, 256},
                      {"kCA R8 S3 t256", kCA<8, 3, 256>, 8, 3, 256}, {"kCA R8 S5 t256", kCA<8, 5, 256>, 8, 5, 256},
                      {"kCA R4 S6 t256", kCA<4, 6, 256>, 4, 6, 256}, {"kCA R8 S4 t512", kCA<8, 4, 512>, 8, 4, 512}};
    for (const CV& v : cvs) {
      const int smem = v.R * (int)m0.rb * v.S;
      CK(cudaFuncSetAttribute(v.f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int per = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, v.f, v.NT, smem));
      cudaFuncAttributes fa;
      CK(cudaFuncGetAttributes(&fa, v.f));
      for (int mul : {1, 2}) {
        const int grid = per * SMS / mul;
        if (grid < 1) continue;
        auto pl = [&](const Mat& m) { launchS(v.f, grid, v.NT, smem, s, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, xq); };
        const double e = maxAbs(runOnce(s, m0.y, m0.rows, 0xff, [&] { pl(m0); }), &y0), tt = chain(pl);
        printf("%-20s %-16s %d/SM%s (%d regs, %d KB)  %7.2f us, %.3f of D2D  (max |dy| %.2e of %.2e)\n", shapes[k].name, v.name, per,
               mul > 1 ? " /2" : "", fa.numRegs, smem >> 10, tt * 1e6, lb / tt / 1e9 / d2d, e, maxAbs(y0));
        fflush(stdout);
      }
    }
    return 0;
  }
  // mode sk: the down chain (32 launches, 4096x14336), Q4_K then Q6KA, as
  // the step runs it (gemvq_x then the one-wave kernel), with x held, and by
  // the kernels that quantize their own slice of x (kSK2, kSK6; kSK with
  // SK1=1), each checked first against the step's output.
  if (argc > 1 && strcmp(argv[1], "sk") == 0) {
    uint8_t* xq14 = gXQ[1];
    auto quantx = [&] { launchS(gemvq_x, (14336 / 64 * 32 + 255) / 256, 256, 0, s, (const float*)gXf, 14336, 1, xq14); };
    typedef void (*SKFn)(const uint8_t*, long long, float*, int, int, const float*);
    struct SKV { std::string name; SKFn f; int blocks, threads; bool held = false; bool sliceMajor = false; };  // held: X is gemvq_x's output; sliceMajor: W is dn.wL
    for (int k : {4, 5})  // slice-major copies for kSKL2 / kSKL6
      for (Mat& m : mats[k]) {
        const size_t n = (size_t)m.rb * m.rows;
        const int sbb = m.q6 ? 210 : 144, nsb = m.cols / 256;
        CK(cudaMalloc(&m.wL, n));
        slicemajor<<<(unsigned)(((size_t)m.rows * nsb + 255) / 256), 256>>>(m.w, m.wL, m.rows, nsb, sbb);
        if (m.q6) q6ka_relay<<<(unsigned)((n / 210 + 255) / 256), 256>>>(m.wL, (long long)(n / 210));
      }
    CK(cudaDeviceSynchronize());
    // One kind of down (mats[k]): the step's kernel (step(dn), on x that
    // gemvq_x quantized) with gemvq_x before each launch and with x held,
    // then each variant (on wp(dn), its own x), its output (added into a
    // zeroed y) against the step's first.
    auto downSet = [&](const char* kind, int k, const char* stepName, auto step, auto wp, const std::vector<SKV>& vs) {
      const Mat& d0 = mats[k][0];
      const std::vector<float> y0 = runOnce(s, d0.y, 4096, 0xff, [&] { quantx(); step(d0); });
      double lb = 0;
      for (int L = 0; L < 32; L++) lb += (double)mats[k][L].rb * 4096;
      lb /= 32;
      for (int held = 0; held < 2; held++) {
        const double t = chainBest(s, 32, [&](int L) {
          if (!held) quantx();
          step(mats[k][L]);
        });
        printf("%s %-12s %-18s %7.2f us a launch, %.3f of D2D\n", kind, held ? "x held" : "gemvq_x +", stepName, t * 1e6, lb / t / 1e9 / d2d);
        fflush(stdout);
      }
      for (const SKV& v : vs) {
        const float* xv = v.held ? (const float*)xq14 : (const float*)gXf;
        auto run = [&](const Mat& dn) { launchS(v.f, v.blocks, v.threads, 0, s, v.sliceMajor ? (const uint8_t*)dn.wL : wp(dn), dn.rb, dn.y, 4096, 14336, xv); };
        const double e = maxAbs(runOnce(s, d0.y, 4096, 0, [&] { run(d0); }), &y0);
        const double t = chainBest(s, 32, [&](int L) { run(mats[k][L]); });
        printf("%s %-31s %7.2f us a launch, %.3f of D2D  (max |dy| %.2e of %.2e)\n", kind, v.name.c_str(), t * 1e6, lb / t / 1e9 / d2d, e, maxAbs(y0));
        fflush(stdout);
      }
    };
    auto walk = [](const char* name, SKFn f, int RC, int WP) {  // kSK2 / kSK6 at 4096 x 14336
      const int blocks = (4096 + RC - 1) / RC * 14;
      return SKV{std::string(name) + " (" + std::to_string(blocks) + " blocks)", f, blocks, 32 * WP};
    };
    std::vector<SKV> q4 = {walk("kSK2 RC256 UN4", kSK2<256, 4>, 256, 8), walk("kSK2 RC256 UN8", kSK2<256, 8>, 256, 8),
                           walk("kSK2 RC256 UN4 w16", kSK2<256, 4, 16>, 256, 16), walk("kSK2 RC256 UN2 w16", kSK2<256, 2, 16>, 256, 16),
                           walk("kSK2 RC512 UN4 w16", kSK2<512, 4, 16>, 512, 16), walk("kSK2 RC128 UN4 w4", kSK2<128, 4, 4>, 128, 4),
                           walk("kSK2 RC256 UN8 w4", kSK2<256, 8, 4>, 256, 4)};
    auto even = [](const char* name, SKFn f, int chunks, int WP) {  // kSKE4 / kSKE6: chunks x 14 blocks
      return SKV{std::string(name) + " C" + std::to_string(chunks) + " (" + std::to_string(chunks * 14) + " blocks)", f, chunks * 14, 32 * WP};
    };
    if (getenv("SKE")) {  // even row chunks (runtime pairs a warp): 12.0-24.8 us (-sk4.txt)
      for (int c : {8, 9, 18}) {
        q4.push_back(even("kSKE4 UN4 w16", kSKE4<4, 16>, c, 16));
        q4.push_back(even("kSKE4 UN2 w16", kSKE4<2, 16>, c, 16));
        q4.push_back(even("kSKE4 UN4 w8", kSKE4<4, 8>, c, 8));
      }
      q4.push_back(even("kSKE4 UN4 w32", kSKE4<4, 32>, 9, 32));
      q4.push_back(even("kSKE4 UN2 w32", kSKE4<2, 32>, 9, 32));
    }
    // RC 480: 9 chunks (the last 256 rows), 126 blocks.
    q4.push_back(walk("kSK2 RC480 UN4 w16", kSK2<480, 4, 16>, 480, 16));
    q4.push_back(walk("kSK2 RC480 UN3 w16", kSK2<480, 3, 16>, 480, 16));
    q4.push_back(walk("kSK2 RC480 UN5 w16", kSK2<480, 5, 16>, 480, 16));
    q4.push_back(walk("kSK2 RC480 UN2 w16", kSK2<480, 2, 16>, 480, 16));
    q4.push_back(walk("kSK2 RC240 UN3 w8", kSK2<240, 3, 8>, 240, 8));
    q4.push_back(walk("kSK2 RC960 UN4 w32", kSK2<960, 4, 32>, 960, 32));
    // The engine's geometry (gemvq_sk_p: RC 256, UN 4, 8 warps) with x held
    // (kSKH2): the slices' own quantization's share.
    auto sm = [&](SKV v) { v.sliceMajor = true; return v; };
    q4.push_back(sm(walk("kSKL2 RC256 UN4 w8, slice-major", kSKL2<256, 4, 8>, 256, 8)));
    q4.push_back(sm(walk("kSKL2 RC512 UN4 w16, slice-major", kSKL2<512, 4, 16>, 512, 16)));
    q4.push_back(sm(walk("kSKL2 RC240 UN3 w8, slice-major", kSKL2<240, 3, 8>, 240, 8)));
    q4.push_back(walk("kSK2P RC256 UN4 w8, x loads first", kSK2P<256, 4, 8>, 256, 8));
    q4.push_back(walk("kSK2S RC256 UN4 w8, x from shared", kSK2S<256, 4, 8>, 256, 8));
    q4.push_back(walk("kSK2S RC256 UN6 w8, x from shared", kSK2S<256, 6, 8>, 256, 8));
    q4.push_back(walk("kSK2S RC256 UN8 w8, x from shared", kSK2S<256, 8, 8>, 256, 8));
    q4.push_back(walk("kSK2S RC160 UN3 w8, x from shared", kSK2S<160, 3, 8>, 160, 8));
    {
      SKV h = walk("kSKH2 RC256 UN4 w8, x held", kSKH2<256, 4, 8>, 256, 8);
      h.held = true;
      q4.push_back(h);
      SKV h16 = walk("kSKH2 RC512 UN4 w16, x held", kSKH2<512, 4, 16>, 512, 16);
      h16.held = true;
      q4.push_back(h16);
    }
    if (getenv("SK1")) {  // the first cut, one unit a lane
      const std::pair<int, SKFn> nvs[] = {{2, kSK<2>}, {4, kSK<4>}, {8, kSK<8>}, {16, kSK<16>}};
      for (const auto& nv : nvs) {
        const int blocks = (4096 / (1024 / nv.first)) * (14336 / (64 * nv.first));
        q4.push_back({"kSK NV" + std::to_string(nv.first) + " (" + std::to_string(blocks) + " blocks)", nv.second, blocks, 256});
      }
    }
    downSet("down4", 4, "gemvq_p2u2_1",
            [&](const Mat& dn) { launchS((KFn)gemvq_p2u2_1, 2048, 32, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14); },
            [](const Mat& dn) { return (const uint8_t*)dn.w; }, q4);
    // Q6KA down: the step's one-wave kernel (k6R<2, 2, true> = gemvq_q6ka_r2u2_1) against kSK6.
    downSet("down6", 5, "q6ka_r2u2",
            [&](const Mat& dn) { launchS((KFn)k6R<2, 2, true>, 2048, 32, 0, s, (const uint8_t*)dn.w6s, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14); },
            [](const Mat& dn) { return (const uint8_t*)dn.w6s; },
            {walk("kSK6 RC512 UN4 w16", kSK6<512, 4, 16>, 512, 16), walk("kSK6 RC512 UN2 w16", kSK6<512, 2, 16>, 512, 16),
             walk("kSK6 RC256 UN4 w8", kSK6<256, 4, 8>, 256, 8), even("kSKE6 UN4 w16", kSKE6<4, 16>, 9, 16),
             walk("kSK6 RC480 UN4 w16", kSK6<480, 4, 16>, 480, 16), walk("kSK6 RC480 UN3 w16", kSK6<480, 3, 16>, 480, 16),
             walk("kSK6 RC480 UN5 w16", kSK6<480, 5, 16>, 480, 16), walk("kSK6 RC480 UN2 w16", kSK6<480, 2, 16>, 480, 16),
             walk("kSK6 RC240 UN3 w8", kSK6<240, 3, 8>, 240, 8), walk("kSK6 RC240 UN5 w8", kSK6<240, 5, 8>, 240, 8),
             walk("kSK6P RC240 UN3 w8, x loads first", kSK6P<240, 3, 8>, 240, 8),
             sm(walk("kSKL6 RC240 UN3 w8, slice-major", kSKL6<240, 3, 8>, 240, 8)),
             sm(walk("kSKL6 RC480 UN3 w16, slice-major", kSKL6<480, 3, 16>, 480, 16)),
             sm(walk("kSKL6 RC256 UN4 w8, slice-major", kSKL6<256, 4, 8>, 256, 8)),
             walk("kSK6S RC240 UN3 w8, x from shared", kSK6S<240, 3, 8>, 240, 8),
             walk("kSK6S RC240 UN4 w8, x from shared", kSK6S<240, 4, 8>, 240, 8),
             walk("kSK6S RC240 UN5 w8, x from shared", kSK6S<240, 5, 8>, 240, 8),
             walk("kSK6S RC240 UN6 w8, x from shared", kSK6S<240, 6, 8>, 240, 8),
             walk("kSK6S RC160 UN3 w8, x from shared (3 blocks a multiprocessor)", kSK6S<160, 3, 8>, 160, 8),
             walk("kSK6S RC160 UN2 w8, x from shared", kSK6S<160, 2, 8>, 160, 8),
             walk("kSK6P RC240 UN4 w8, x loads first", kSK6P<240, 4, 8>, 240, 8),
             walk("kSK6P RC256 UN4 w8, x loads first", kSK6P<256, 4, 8>, 256, 8),
             walk("kSK6B RC240 UN3 w8, 6-in-8 layout (timing only)", kSK6B<240, 3, 8>, 240, 8),
             walk("kSK6B RC240 UN4 w8, 6-in-8 layout (timing only)", kSK6B<240, 4, 8>, 240, 8),
             walk("kSK6B RC240 UN2 w8, 6-in-8 layout (timing only)", kSK6B<240, 2, 8>, 240, 8),
             [&] {
               SKV h = walk("kSKH6 RC240 UN3 w8, x held", kSKH6<240, 3, 8>, 240, 8);
               h.held = true;
               return h;
             }()});
    return 0;
  }
  // mode dchain6: the down chain as the engine now runs it (Q4_K layers by
  // gemvq_p2u2_1, the pair kernel) with the Q6KA layers by k6R<R, UN,
  // true> in several geometries, some of them one wave (2048 blocks of one
  // warp), so that every block's first units are in flight before the
  // wait, during gate/up's tail and the x launch.
  if (argc > 1 && strcmp(argv[1], "dchain6") == 0) {
    uint8_t* xq14 = gXQ[1];
    // KPS=1..3: the Q4_K layers by kPS<2, 2, KPS> (KPS more units a lane in
    // shared memory before the wait) instead of gemvq_p2u2_1.
    const int kps = getenv("KPS") ? atoi(getenv("KPS")) : 0;
    {  // kPS against gemvq_p2u2_1: the same walk, so the same bits
      const Mat& dn = mats[4][0];
      std::vector<float> y0(4096), y1(4096);
      launchS((KFn)gemvq_p2u2_1, 2048, 32, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(y0.data(), dn.y, 4 * 4096, cudaMemcpyDeviceToHost));
      for (int k = 1; k <= 3; k++) {
        CK(cudaMemset(dn.y, 0xff, 4 * 4096));
        launchS(k == 3 ? kPS<2, 2, 3> : (k == 2 ? kPS<2, 2, 2> : kPS<2, 2, 1>), 2048, 32, k * 2 * 3 * 32 * 16, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(y1.data(), dn.y, 4 * 4096, cudaMemcpyDeviceToHost));
        printf("check kPS K=%d: %s\n", k, memcmp(y0.data(), y1.data(), 4 * 4096) == 0 ? "bit-identical to gemvq_p2u2_1" : "MISMATCH");
      }
    }
    struct G6 { int R, UN, w; };
    const G6 g6s[] = {{4, 1, 8}, {2, 2, 1}, {2, 1, 1}, {2, 1, 2}, {4, 1, 2}, {4, 2, 1}, {2, 2, 2}};
    for (const G6& g6 : g6s) {
      KFn f6 = nullptr;
      if (g6.R == 4 && g6.UN == 1) f6 = k6R<4, 1, true>;
      if (g6.R == 4 && g6.UN == 2) f6 = k6R<4, 2, true>;
      if (g6.R == 2 && g6.UN == 1) f6 = k6R<2, 1, true>;
      if (g6.R == 2 && g6.UN == 2) f6 = k6R<2, 2, true>;
      for (int variant = 0; variant < 4; variant++) {
        const bool withx = variant % 2 == 0, only6 = variant >= 2;
        double lb = 0;
        const double per = chainBest(s, 32, [&](int L) {
          const bool q6 = only6 || L % 2 == 1;
          const Mat& dn = q6 ? mats[5][L] : mats[4][L];
          if (withx) launchS(gemvq_x, (14336 / 64 + 7) / 8, 256, 0, s, (const float*)gXf, 14336, 1, xq14);
          if (q6) launchS(f6, (4096 + g6.R - 1) / g6.R, 32 * g6.w, 0, s, (const uint8_t*)dn.w6s, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
          else if (kps == 0) launchS((KFn)gemvq_p2u2_1, 2048, 32, 0, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
          else launchS(kps == 3 ? kPS<2, 2, 3> : (kps == 2 ? kPS<2, 2, 2> : kPS<2, 2, 1>), 2048, 32, kps * 2 * 3 * 32 * 16, s, (const uint8_t*)dn.w, dn.rb, dn.y, 4096, 14336, (const uint8_t*)xq14);
          lb += (double)dn.rb * dn.rows;
        });
        printf("Q6KA R%d un%d w%d  %-10s %-7s %7.2f us per launch, %.3f of D2D\n", g6.R, g6.UN, g6.w, only6 ? "Q6KA" : (kps ? "Q4ps+Q6KA" : "Q4p+Q6KA"), withx ? "+x" : "x held", per * 1e6, lb / 32 / per / 1e9 / d2d);
        fflush(stdout);
      }
    }
    return 0;
  }
  // mode wlayer: the layer chain (q/k/v, o, glu, down4 x 32, Q4_K, x held)
  // with kW for q/k/v, o and gate/up in each of a list of configurations,
  // down by the step's u2 kernel or by kW, against the step's kernels.
  if (argc > 1 && strcmp(argv[1], "wlayer") == 0) {
    double lb = 0;
    for (int k : {0, 1, 3, 4}) lb += bytes[k] / shapes[k].n;
    const Var v0{0, 0, 0, 0}, vu2{5, 4, 21, 2};
    struct LC { Var q, o, g, d; };
    std::vector<LC> lcs = {{v0, vu2, v0, vu2}};
    if (getenv("XT32")) {
      const Var q1{26, 4, 1, 2}, o1{26, 4, 2, 2}, g1{26, 4, 1, 2}, d1{26, 4, 2, 2};
      const Var ou{24, 4, 1, 2}, du{24, 2, 2, 1};
      lcs.push_back({q1, o1, g1, d1});
      lcs.push_back({q1, ou, g1, du});
      lcs.push_back({q1, vu2, g1, vu2});
      lcs.push_back({v0, ou, g1, du});
      lcs.push_back({q1, ou, v0, du});
      lcs.push_back({v0, ou, v0, du});
      lcs.push_back({Var{26, 8, 1, 2}, ou, g1, du});
      lcs.push_back({Var{26, 4, 1, 1}, ou, Var{26, 4, 1, 1}, du});
      lcs.push_back({v0, vu2, v0, vu2});
    } else if (getenv("KUT")) {
      const Var ou{24, 4, 1, 2}, gu{24, 4, 1, 2}, du{24, 2, 2, 1};
      const Var op{25, 4, 1, 2}, gp{25, 4, 1, 2}, dp{25, 2, 2, 1}, qp{25, 4, 1, 1}, qp2{25, 4, 1, 2};
      lcs.push_back({v0, ou, gu, du});
      lcs.push_back({v0, ou, v0, du});
      lcs.push_back({v0, vu2, v0, du});
      lcs.push_back({v0, op, gp, dp});
      lcs.push_back({qp, op, gp, dp});
      lcs.push_back({qp2, op, gp, dp});
      lcs.push_back({v0, op, v0, dp});
      lcs.push_back({v0, vu2, v0, dp});
      lcs.push_back({v0, op, gp, Var{25, 4, 1, 2}});
      lcs.push_back({v0, vu2, v0, vu2});
    } else if (getenv("KU")) {
      for (int l1 : {0, 10}) for (int R : {2, 4}) for (int un : {1, 2}) for (int w : {1, 2}) {
        const Var c{23, R, un + l1, w};
        lcs.push_back({c, c, c, vu2});
        for (int dw : {2, 4, 8}) lcs.push_back({c, c, c, Var{23, 4, 1 + l1, dw}});
        lcs.push_back({c, c, c, Var{23, 4, 2 + l1, 2}});
      }
      lcs.push_back({v0, vu2, v0, vu2});
    } else if (getenv("KW")) {
      std::vector<Var> cs;
      for (int R : {2, 4, 8}) for (int un : {1, 2}) for (int gpw : {1, 2}) {
        if (R == 8 && un == 2) continue;
        cs.push_back({21, R, un + 10 * gpw, 2});
      }
      cs.push_back({21, 4, 11, 4}); cs.push_back({21, 4, 21, 4});
      for (const Var& c : cs) {
        lcs.push_back({c, c, c, vu2});
        lcs.push_back({c, vu2, c, vu2});
        lcs.push_back({c, c, c, Var{21, 4, 12, 2}});
        lcs.push_back({c, c, c, Var{21, 2, 12, 2}});
      }
    } else {
      // kG on a grid of b blocks a multiprocessor for q/k/v and/or gate/up
      // (so that o's and down's u2 blocks can become resident early)
      for (int b : {2, 3, 4, 6, 8, 11, 14}) {
        const Var c{22, 4, b, 2};
        lcs.push_back({c, vu2, v0, vu2});
        lcs.push_back({v0, vu2, c, vu2});
        lcs.push_back({c, vu2, c, vu2});
      }
      for (int b : {4, 8}) lcs.push_back({Var{22, 4, b, 4}, vu2, Var{22, 4, b, 4}, vu2});
      for (int b : {4, 8}) lcs.push_back({Var{22, 2, b, 2}, vu2, Var{22, 2, b, 2}, vu2});
      lcs.push_back({v0, vu2, v0, vu2});
    }
    for (auto& lc : lcs) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      bool ok = true;
      for (int L = 0; L < 32; L++) {
        ok = enqueue(lc.q, mats[0][L], s) && ok;
        ok = enqueue(lc.o, mats[1][L], s) && ok;
        ok = enqueue(lc.g, mats[3][L], s) && ok;
        ok = enqueue(lc.d, mats[4][L], s) && ok;
      }
      CK(cudaStreamEndCapture(s, &g));
      if (!ok) { printf("config not built\n"); cudaGraphDestroy(g); continue; }
      const double per = graphBest(g, s, 5, 10) / 32;
      auto nm = [](const Var& v, char* o) {
        if (v.kind == 0) snprintf(o, 32, "fused");
        else if (v.kind == 5) snprintf(o, 32, "u2");
        else if (v.kind == 22) snprintf(o, 32, "kG R%d b%d w%d", v.R, v.CH, v.warps);
        else if (v.kind == 26) snprintf(o, 32, "kRT R%d un%d w%d", v.R, v.CH, v.warps);
        else if (v.kind == 25) snprintf(o, 32, "kUP R%d un%d w%d", v.R, v.CH, v.warps);
        else if (v.kind == 24) snprintf(o, 32, "kU xT R%d un%d w%d", v.R, v.CH, v.warps);
        else if (v.kind == 23) snprintf(o, 32, "kU R%d un%d%s w%d", v.R, v.CH % 10, v.CH / 10 ? " L1" : "", v.warps);
        else snprintf(o, 32, "kW R%d un%d g%d w%d", v.R, v.CH % 10, v.CH / 10, v.warps);
      };
      char a1[32], a2[32], a3[32], a4[32];
      nm(lc.q, a1); nm(lc.o, a2); nm(lc.g, a3); nm(lc.d, a4);
      printf("qkv %-16s o %-16s glu %-16s down %-16s %7.2f us per layer, %.3f of D2D\n", a1, a2, a3, a4, per * 1e6, lb / per / 1e9 / d2d);
      fflush(stdout);
    }
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "layer") == 0) {
    cudaStream_t s2; CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    std::vector<cudaEvent_t> evs(33);
    for (auto& ev : evs) CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    double lb = 0;
    const int ks[4] = {0, 1, 3, 4};
    for (int k : ks) lb += bytes[k] / shapes[k].n;
    struct LV { const char* name; int rd, po, gmb, el, g; };
    std::vector<LV> lvs = {{"step kernels", 0, 0, 0, 0, 0}, {"read-only", 1, 0, 0, 0, 0}};
    // read-only, one launch a GEMV (gate and up together): rd = 10 + NL, g = blocks a multiprocessor
    for (int nl : {2, 4, 8}) for (int g : {2, 4, 8, 16}) lvs.push_back({"rdn", 10 + nl, 0, 0, 0, g});
    for (int g : {16, 32, 64}) {
      if (getenv("NOPF")) break;
      lvs.push_back({"pf o", 0, 1, 0, 0, g}); lvs.push_back({"pf o EL", 0, 1, 0, 1, g});
      for (int mb : {4, 8, 16}) { lvs.push_back({"pf gu", 0, 0, mb, 0, g}); lvs.push_back({"pf gu EL", 0, 0, mb, 1, g}); lvs.push_back({"pf o+gu", 0, 1, mb, 0, g}); lvs.push_back({"pf o+gu EL", 0, 1, mb, 1, g}); }
    }
    for (auto& lv : lvs) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int L = 0; L < 32; L++) {
        const Mat &q = mats[0][L], &o = mats[1][L], &gu = mats[3][L], &dn = mats[4][L];
        if (lv.po || lv.gmb) {
          CK(cudaEventRecord(evs[L], s));
          CK(cudaStreamWaitEvent(s2, evs[L], 0));
          const long long na = lv.po ? o.rb * o.rows : 0, nb = std::min((long long)lv.gmb << 19, gu.rb * gu.rows);
          if (lv.el) l2pf<1><<<lv.g, 128, 0, s2>>>(o.w, na, gu.w, gu.w1, nb);
          else l2pf<0><<<lv.g, 128, 0, s2>>>(o.w, na, gu.w, gu.w1, nb);
        }
        if (lv.rd > 10) {
          for (const Mat* mm : {&q, &o, &gu, &dn}) {
            const long long n = mm->rb * mm->rows / 16;
            const uint4* p1 = mm->w1 ? (const uint4*)mm->w1 : nullptr;
            auto f = lv.rd == 12 ? rdn<2> : (lv.rd == 14 ? rdn<4> : rdn<8>);
            launchS(f, SMS * lv.g, 256, 0, s, (const uint4*)mm->w, n, p1, mm->w1 ? n : 0LL, gOut);
          }
          continue;
        }
        const Var v0{lv.rd ? 3 : 0, 0, 0, 0}, vu2{lv.rd ? 3 : 5, 4, 21, 2};
        enqueue(v0, q, s); enqueue(vu2, o, s); enqueue(v0, gu, s); enqueue(vu2, dn, s);
      }
      if (lv.po || lv.gmb) { CK(cudaEventRecord(evs[32], s2)); CK(cudaStreamWaitEvent(s, evs[32], 0)); }
      CK(cudaStreamEndCapture(s, &g));
      const double per = graphBest(g, s, 5, 10) / 32;
      if (lv.rd > 10) printf("rdn nl%d      g%-3d (4 launches):  %7.2f us per layer, %.3f of D2D\n", lv.rd - 10, lv.g, per * 1e6, lb / per / 1e9 / d2d);
      else printf("%-12s g%-3d o%d gu %2d MB: %7.2f us per layer, %.3f of D2D\n", lv.name, lv.g, lv.po, lv.gmb, per * 1e6, lb / per / 1e9 / d2d);
      fflush(stdout);
    }
    return 0;
  }
  // correctness against the baseline, first matrix of each shape (TRACE=1:
  // each variant named before it runs, to find one that faults)
  const bool trace = getenv("TRACE") && strcmp(getenv("TRACE"), "1") == 0;
  for (int k = 0; k < NS; k++) {
    const Mat& m = mats[k][0];
    std::vector<float> y0(m.rows), y1(m.rows);
    enqueue(vars[0], m, s); CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(y0.data(), m.y, 4 * m.rows, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (auto& v : vars) {
      if (v.kind == 0 || v.kind == 3 || (v.kind == 8 && !v.pfmb)) continue;  // partials only: no y to check
      CK(cudaMemset(m.y, 0xff, 4 * m.rows));
      CK(cudaMemset(gFlags, 0, 4 * gNFlags));
      if (trace) { printf("trace: %s kind %d R %d CH %d w %d pfmb %d\n", shapes[k].name, v.kind, v.R, v.CH, v.warps, v.pfmb); fflush(stdout); }
      if (!enqueue(v, m, s)) continue;
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(y1.data(), m.y, 4 * m.rows, cudaMemcpyDeviceToHost));
      double e = 0, n2 = 0;
      for (int i = 0; i < m.rows; i++) { e += (y1[i] - y0[i]) * (double)(y1[i] - y0[i]); n2 += y0[i] * (double)y0[i]; }
      const double nmse = e / n2;
      if (!(nmse < 1e-10)) printf("MISMATCH %s kind %d R %d CH %d w %d: nmse %.3g\n", shapes[k].name, v.kind, v.R, v.CH, v.warps, nmse);
      worst = std::max(worst, nmse);
    }
    printf("check %s: worst nmse %.3g (|y|^2 %.3g)\n", shapes[k].name, worst, 0.0);
  }
  printf("cells: us per launch / ratio of weight bytes per s to D2D; %d launches per shape back to back, PDL\n", 32);
  printf("%-22s", "variant");
  for (int k = 0; k < NS; k++) printf(" %19s", shapes[k].name);
  printf("\n");
  for (auto& v : vars) {
    char nm[64];
    if (v.kind == 0) snprintf(nm, 64, "baseline (rule warps)");
    else if (v.kind == 1) snprintf(nm, 64, "gemvq_q6k_s (rule)");
    else if (v.kind == 3) snprintf(nm, 64, "read-only");
    else if (v.kind == 9) snprintf(nm, 64, "staged6 LDS R4 CH2 w%d", v.warps);
    else if (v.kind == 20) snprintf(nm, 64, "kRX R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 27) snprintf(nm, 64, "soa6 xT R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 26) snprintf(nm, 64, "kR xT R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 25) snprintf(nm, 64, "kU xT perm R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 24) snprintf(nm, 64, "kU xT R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 23) snprintf(nm, 64, "kU R%d un%d%s w%d", v.R, v.CH % 10, v.CH / 10 ? " L1" : "", v.warps);
    else if (v.kind == 22) snprintf(nm, 64, "kG R%d b%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 21) snprintf(nm, 64, "kW R%d un%d g%d w%d", v.R, v.CH % 10, v.CH / 10, v.warps);
    else if (v.kind == 19) snprintf(nm, 64, "ring R%d D%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 17) snprintf(nm, 64, "glu+xq opw%d un%d", v.R, v.CH);
    else if (v.kind == 18) snprintf(nm, 64, "glu, then gemvq_x");
    else if (v.kind == 16) snprintf(nm, 64, "soa6 xq R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 12) snprintf(nm, 64, "soa6 L2 R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 13) snprintf(nm, 64, "kR%s R%d un%d w%d", v.CH / 10 ? " L2" : "", v.R, v.CH % 10, v.warps);
    else if (v.kind == 11) snprintf(nm, 64, "dx%s R%d un%d w%d", v.CH / 10 ? " inx" : " +x", v.R, v.CH % 10, v.warps);
    else if (v.kind == 10) snprintf(nm, 64, "soa6 R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 8) snprintf(nm, 64, "parts R%d S%d un%d w%d%s", v.R, v.CH / 10, v.CH % 10, v.warps, v.pfmb ? " +sum" : "");
    else if (v.kind == 7) snprintf(nm, 64, "ring R%d NS%d C%d w%d", v.R, v.CH / 100, v.CH % 100, v.warps);
    else if (v.kind == 6) snprintf(nm, 64, "k6R R%d un%d w%d", v.R, v.CH, v.warps);
    else if (v.kind == 5) snprintf(nm, 64, "kR R%d un%d S%d w%d", v.R, v.CH / 10, v.CH % 10, v.warps);
    else if (v.kind == 4) snprintf(nm, 64, "kp4 db%d pf%d %dMB t%d", v.R, v.CH, v.pfmb, v.tail);
    else snprintf(nm, 64, "staged R%d CH%d w%d", v.R, v.CH, v.warps);
    printf("%-22s", nm);
    for (int k = 0; k < NS; k++) {
      const double t = timeChain(mats[k], v, s, shapes[k].n > 8 ? 10 : 20);
      if (t < 0) printf(" %19s", "-");
      else printf("  %7.2fus %5.3f  ", t / shapes[k].n * 1e6, bytes[k] / t / 1e9 / d2d);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
