// Tensor-core GEMM for prefill and batched passes: Y[m][n] = W[n] . X[m]
// for M activation rows (tokens) against N weight rows. Two paths
// (gemm.go chooses):
//
//   - dequantize-then-GEMM (compute_80, every m above the GEMV batch):
//     gemm_x16 converts X to f16 once, gemm_deq_<type> decodes the weights
//     to f16 (whole matrix, or large panels) into a workspace, and one pure
//     f16 GEMM gemm_h_<config> (cp.async pipeline, swizzled shared memory,
//     ldmatrix, mma.sync) multiplies them; F16 weights are read in place.
//     See the section below.
//   - on the fly (gemm_<type>; compute_61 devices): weights decoded
//     inside the MMA loop, no workspace. Described next.
//
// On-the-fly kernel. Block tile: 128 weight rows x BN tokens (BN = 128),
// k in steps of 32;
// 2*BN threads (8 warps as 2 x 4, each 64 weight rows x 32 tokens: 4 x 4
// m16n8k16 tiles, 64 float accumulators). Shared memory holds two f16
// stages of the weight and activation tiles (row stride 40 halves: the 8
// rows an ldmatrix reads hit 32 distinct banks). Per k-step every thread
// first issues its global loads for the next step (threads 0..127: weight
// row t's 32-element part; every thread: token t/2's 16 activations), then
// the warps run their 32 MMAs on the current stage (fragments by
// ldmatrix.x4), then each thread decodes/converts what it loaded into the
// other stage, and one barrier ends the step. sm_80 and newer use mma.sync
// (f16 in, f32 accumulate); the compute_61 build computes the same
// fragments with FMAs. BN = 128 beat BN = 64 (1.6x at 512 tokens) at two
// blocks per multiprocessor.
#include "common.cuh"

#define BM 128  // weight rows per block
#define BK 32
#define LDS 40  // padded row stride in halves

__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int T, int BN>
__device__ __forceinline__ void gemm_body(const uint8_t* __restrict__ W, long long rowBytes, int N, int K,
                                          const float* __restrict__ X, int xstride, int M, float* __restrict__ Y,
                                          int ystride) {
  constexpr int BE = Tr<T>::BE, BB = Tr<T>::BB;
  constexpr int DOFF = T == T_INT8 ? 4 : 0;
  __shared__ __align__(16) __half Ws[2][BM * LDS];
  __shared__ __align__(16) __half Xs[2][BN * LDS];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * BM, m0 = blockIdx.y * BN;
  const int wn = (warp & 1) * 64, wm = (warp >> 1) * 32;  // warp tile origin (weights, tokens)

  // Loaders: weight row tid; token tid/2, activations 16*(tid&1)..+15.
  const int wrow = n0 + tid;
  const bool wload = tid < BM;  // BN = 128: warps 4..7 only convert activations
  const bool wok = wrow < N;
  const uint8_t* wp = W + (long long)min(wrow, N - 1) * rowBytes + DOFF;
  float wscale = 1.0f;
  if (T == T_INT8 && wok) wscale = *reinterpret_cast<const float*>(W + (long long)wrow * rowBytes);
  const int xr = tid >> 1, xh = tid & 1;
  const bool xok = m0 + xr < M;
  const float* xp = X + (long long)min(m0 + xr, M - 1) * xstride + 16 * xh;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  Part<T> part;
  float4 xv[4];
  auto fetch = [&](int k0) {
    if (wload) part.load(wp + (long long)(k0 / BE) * BB, (k0 % BE) / 32);
#pragma unroll
    for (int i = 0; i < 4; i++) xv[i] = __ldg(reinterpret_cast<const float4*>(xp + k0) + i);
  };
  auto store = [&](int buf) {
    uint4* wd = reinterpret_cast<uint4*>(&Ws[buf][tid * LDS]);
#pragma unroll
    for (int i = 0; i < 4 && wload; i++) {
      float a[4], b[4];
      part.get4(2 * i, a);
      part.get4(2 * i + 1, b);
      uint4 v;
      v.x = wok ? pack_h2(a[0] * wscale, a[1] * wscale) : 0u;
      v.y = wok ? pack_h2(a[2] * wscale, a[3] * wscale) : 0u;
      v.z = wok ? pack_h2(b[0] * wscale, b[1] * wscale) : 0u;
      v.w = wok ? pack_h2(b[2] * wscale, b[3] * wscale) : 0u;
      wd[i] = v;
    }
    uint4* xd = reinterpret_cast<uint4*>(&Xs[buf][xr * LDS + 16 * xh]);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      uint4 v;
      v.x = xok ? pack_h2(xv[2 * i].x, xv[2 * i].y) : 0u;
      v.y = xok ? pack_h2(xv[2 * i].z, xv[2 * i].w) : 0u;
      v.z = xok ? pack_h2(xv[2 * i + 1].x, xv[2 * i + 1].y) : 0u;
      v.w = xok ? pack_h2(xv[2 * i + 1].z, xv[2 * i + 1].w) : 0u;
      xd[i] = v;
    }
  };

  fetch(0);
  store(0);
  __syncthreads();
  const int nk = K / BK;
  for (int kt = 0; kt < nk; kt++) {
    const int buf = kt & 1;
    if (kt + 1 < nk) fetch((kt + 1) * BK);
    const __half* Wb = Ws[buf];
    const __half* Xb = Xs[buf];
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
#if __CUDA_ARCH__ >= 800
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const __half* p = Wb + (wn + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDS + kk + 8 * (lane >> 4);
        const unsigned s = (unsigned)__cvta_generic_to_shared(p);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                     : "r"(s));
      }
#pragma unroll
      for (int jp = 0; jp < 2; jp++) {
        const __half* p = Xb + (wm + 16 * jp + (lane & 7) + 8 * (lane >> 4)) * LDS + kk + 8 * ((lane >> 3) & 1);
        const unsigned s = (unsigned)__cvta_generic_to_shared(p);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b[2 * jp][0]), "=r"(b[2 * jp][1]), "=r"(b[2 * jp + 1][0]), "=r"(b[2 * jp + 1][1])
                     : "r"(s));
      }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};"
              : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
              : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
#else
      // Same fragment semantics with FMAs: c[r][c] += sum_k A[r][k] B[k][c],
      // c0,c1: row g, cols 2t4, 2t4+1; c2,c3: row g+8.
      const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const __half* As = Wb + (wn + 16 * i) * LDS + kk;
          const __half* Bs = Xb + (wm + 8 * j) * LDS + kk;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int r = g + 8 * (e >> 1), c = 2 * t4 + (e & 1);
            float s = acc[i][j][e];
#pragma unroll 1
            for (int k = 0; k < 16; k++) s = fmaf(__half2float(As[r * LDS + k]), __half2float(Bs[c * LDS + k]), s);
            acc[i][j][e] = s;
          }
        }
#endif
    }
    if (kt + 1 < nk) store(buf ^ 1);
    __syncthreads();
  }

  // c0,c1: weight row g, tokens 2t4, 2t4+1; c2,c3: weight row g+8.
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int n = n0 + wn + 16 * i + g + 8 * (e >> 1);
        const int m = m0 + wm + 8 * j + 2 * t4 + (e & 1);
        if (n < N && m < M) Y[(long long)m * ystride + n] = acc[i][j][e];
      }
}

#define GEMM_BN 128
#define GEMM_TYPE(TY, NAME)                                                                                  \
  extern "C" __global__ void __launch_bounds__(2 * GEMM_BN, 2) gemm_##NAME(                                  \
      const uint8_t* W, long long rowBytes, int N, int K, const float* X, int xstride, int M, float* Y,     \
      int ystride) {                                                                                         \
    gemm_body<TY, GEMM_BN>(W, rowBytes, N, K, X, xstride, M, Y, ystride);                                    \
  }
FOR_EACH_TYPE(GEMM_TYPE)

// ---------------------------------------------------------------------------
// Dequantize-then-GEMM path (compute_80). For m above a handful of
// tokens the weight decode no longer belongs in the MMA loop: gemm.go
// converts x to f16 once (gemm_x16), dequantizes the weight matrix panel by
// panel into an f16 scratch buffer (gemm_deq_<type>, bandwidth-bound; the
// panel is sized to stay in L2 for the GEMM that follows), and runs one
// pure f16 GEMM (gemm_h_<config>) on the two f16 operands. F16 weights
// (16-byte aligned) skip the dequantization.

// gemm_x16 converts n4 float4s of x to f16.
extern "C" __global__ void gemm_x16(const float4* __restrict__ x, long long n4, uint2* __restrict__ out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    const float4 v = __ldg(x + i);
    uint2 o;
    o.x = pack_h2(v.x, v.y);
    o.y = pack_h2(v.z, v.w);
    out[i] = o;
  }
}

// gemm_deq_<type> decodes rows x K weights (rows back to back, rowBytes
// apart) into f16, row-major with row stride K (so the output is simply
// part after part): one thread per 32-element part. Values are rounded to
// f16 exactly as the on-the-fly kernel rounds them (f32 decode, then one
// rounding). coalesce != 0: each warp passes its 2 KB of output through
// shared memory (uint4 u of the warp's 128 at u ^ ((u >> 3) & 3), which
// keeps both the per-part writes and the row-wise reads conflict-free) so
// every store instruction writes 512 contiguous bytes; 0: each thread
// stores its 64 bytes directly (lanes 64 bytes apart).
template <int T>
__device__ __forceinline__ void deq_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int K,
                                         __half* __restrict__ out, int coalesce) {
  constexpr int BE = Tr<T>::BE, BB = Tr<T>::BB;
  constexpr int DOFF = T == T_INT8 ? 4 : 0;
  __shared__ __align__(16) uint4 st[8][128];
  const int ppr = K / 32;  // parts per row
  const long long total = (long long)rows * ppr;
  const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const bool ok = p < total;
  uint4 v[4];
  if (ok) {
    const int row = (int)(p / ppr), pi = (int)(p - (long long)row * ppr);
    const uint8_t* rp = W + (long long)row * rowBytes;
    float scale = 1.0f;
    if (T == T_INT8) scale = *reinterpret_cast<const float*>(rp);
    Part<T> part;
    part.load(rp + DOFF + (long long)(pi * 32 / BE) * BB, (pi * 32 % BE) / 32);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float a[4], b[4];
      part.get4(2 * i, a);
      part.get4(2 * i + 1, b);
      v[i].x = pack_h2(a[0] * scale, a[1] * scale);
      v[i].y = pack_h2(a[2] * scale, a[3] * scale);
      v[i].z = pack_h2(b[0] * scale, b[1] * scale);
      v[i].w = pack_h2(b[2] * scale, b[3] * scale);
    }
  }
  uint4* d = reinterpret_cast<uint4*>(out);
  if (!coalesce) {
    if (ok)
#pragma unroll
      for (int i = 0; i < 4; i++) d[4 * p + i] = v[i];
    return;
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int u = 4 * lane + i;
    st[w][u ^ ((u >> 3) & 3)] = v[i];
  }
  __syncwarp();
  const long long pw = p - lane;  // the warp's first part
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const int u = 32 * j + lane;
    if (pw + (u >> 2) < total) d[4 * pw + u] = st[w][u ^ ((u >> 3) & 3)];
  }
}

#define DEQ_TYPE(TY, NAME)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) gemm_deq_##NAME(const uint8_t* W, long long rowBytes, \
                                                                    int rows, int K, __half* out,      \
                                                                    int coalesce) {                    \
    deq_body<TY>(W, rowBytes, rows, K, out, coalesce);                                                 \
  }
FOR_EACH_TYPE(DEQ_TYPE)

// gemm_h_<config>: Y[m][n] = sum_k X[m][k] W[n][k] with X (M x K) and W
// (N x K) f16, both K-contiguous with row strides K, Y f32 with row stride
// ystride. mma.sync m16n8k16: A = activations (tokens), B = weights, so a
// thread's accumulator pair c0,c1 is two adjacent outputs of one token row
// (one float2 store).
//
// Block tile HM tokens x HN weight rows, k in steps of HK, ST-stage
// cp.async pipeline; warps tile the block WM x WN. Shared memory rows are
// HK halves in 16-byte chunks, chunk c of row r stored at c ^ f(r) (f(r) =
// r & 7 for 8 chunks a row, (r >> 1) & 3 for 4), so the 8 rows an
// ldmatrix phase reads and the chunks a cp.async wave writes fall in
// distinct bank groups. Out-of-range rows and k chunks are zero-filled
// (cp.async src-size 0), so any M, N and K % 8 == 0 work.
//
// Block order: tiles in bands of GM token tiles; within a band the token
// tile varies fastest, so the blocks resident at one time share few weight
// panels and read each from HBM about once.
#define GM 8

__device__ __forceinline__ void cp_async16(unsigned saddr, const void* g, int bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <int CPR>
__device__ __forceinline__ int swz(int row) {
  return CPR == 8 ? (row & 7) : ((row >> 1) & 3);
}

template <int HM, int HN, int HK, int WM, int WN, int ST>
__device__ __forceinline__ void hgemm_body(const __half* __restrict__ X, int M, const __half* __restrict__ W, int N,
                                           int K, float* __restrict__ Y, int ystride, int pairs) {
#if __CUDA_ARCH__ >= 800
  constexpr int THREADS = 32 * (HM / WM) * (HN / WN);
  constexpr int CPR = HK / 8;  // 16-byte chunks per row
  constexpr int RB = HK * 2;   // bytes per row
  constexpr int ABYTES = HM * RB, STAGE = (HM + HN) * RB;
  constexpr int AI = HM * CPR / THREADS, BI = HN * CPR / THREADS;  // chunks per thread
  constexpr int RSTEP = THREADS / CPR;                             // rows between a thread's chunks
  constexpr int FI = WM / 16, FJ = WN / 8;
  static_assert(HM * CPR % THREADS == 0 && HN * CPR % THREADS == 0, "tile not divisible");
  static_assert(CPR == 4 || CPR == 8, "HK must be 32 or 64");
  extern __shared__ __align__(128) uint8_t smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Block order (see above).
  const int MT = (M + HM - 1) / HM, NT = (N + HN - 1) / HN;
  const int pid = blockIdx.x, band = pid / (GM * NT);
  const int gm = min(GM, MT - band * GM), local = pid - band * GM * NT;
  const int m0 = (band * GM + local % gm) * HM, n0 = (local / gm) * HN;
  if (n0 >= N) return;

  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  // Loader: this thread copies chunk cc of rows r0 + i*RSTEP.
  const int cc = tid % CPR, r0 = tid / CPR;
  const __half* ag[AI];
  const __half* bg[BI];
  bool aok[AI], bok[BI];
  unsigned aso[AI], bso[BI];
#pragma unroll
  for (int i = 0; i < AI; i++) {
    const int r = r0 + i * RSTEP;
    aok[i] = m0 + r < M;
    ag[i] = X + (long long)min(m0 + r, M - 1) * K + cc * 8;
    aso[i] = r * RB + ((cc ^ swz<CPR>(r)) << 4);
  }
#pragma unroll
  for (int i = 0; i < BI; i++) {
    const int r = r0 + i * RSTEP;
    bok[i] = n0 + r < N;
    bg[i] = W + (long long)min(n0 + r, N - 1) * K + cc * 8;
    bso[i] = ABYTES + r * RB + ((cc ^ swz<CPR>(r)) << 4);
  }
  const int nk = (K + HK - 1) / HK;
  auto load = [&](int kt, int st) {
    const int k = kt * HK;
    const bool kok = k + cc * 8 < K;
    const unsigned s = sbase + st * STAGE;
#pragma unroll
    for (int i = 0; i < AI; i++) cp_async16(s + aso[i], kok ? (const void*)(ag[i] + k) : (const void*)X, aok[i] && kok ? 16 : 0);
#pragma unroll
    for (int i = 0; i < BI; i++) cp_async16(s + bso[i], kok ? (const void*)(bg[i] + k) : (const void*)W, bok[i] && kok ? 16 : 0);
  };

  // Fragment addresses: warp tile origin (wm tokens, wn weights).
  const int wm = (warp % (HM / WM)) * WM, wn = (warp / (HM / WM)) * WN;
  const int ar = wm + (lane & 7) + 8 * ((lane >> 3) & 1), ac = lane >> 4;  // A: row, chunk offset
  const int br = wn + (lane & 7) + 8 * (lane >> 4), bc = (lane >> 3) & 1;  // B
  const int asw = swz<CPR>(ar), bsw = swz<CPR>(br);  // rows differ by multiples of 16 below
  const unsigned arow = ar * RB, brow = ABYTES + br * RB;

  float acc[FI][FJ][4];
#pragma unroll
  for (int i = 0; i < FI; i++)
#pragma unroll
    for (int j = 0; j < FJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < ST - 1; s++) {
    if (s < nk) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; kt++) {
    cp_async_wait<ST - 2>();
    __syncthreads();
    // The stage loaded next was consumed in step kt-1, which every thread
    // has finished (barrier above).
    if (kt + ST - 1 < nk) load(kt + ST - 1, (kt + ST - 1) % ST);
    cp_async_commit();
    const unsigned s = sbase + (kt % ST) * STAGE;
#pragma unroll
    for (int kk = 0; kk < HK / 16; kk++) {
      uint32_t a[FI][4], b[FJ][2];
#pragma unroll
      for (int i = 0; i < FI; i++) {
        const unsigned p = s + arow + i * 16 * RB + (((2 * kk + ac) ^ asw) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                     : "r"(p));
      }
#pragma unroll
      for (int jp = 0; jp < FJ / 2; jp++) {
        const unsigned p = s + brow + jp * 16 * RB + (((2 * kk + bc) ^ bsw) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b[2 * jp][0]), "=r"(b[2 * jp][1]), "=r"(b[2 * jp + 1][0]), "=r"(b[2 * jp + 1][1])
                     : "r"(p));
      }
#pragma unroll
      for (int i = 0; i < FI; i++)
#pragma unroll
        for (int j = 0; j < FJ; j++)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};"
              : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
              : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
    }
  }
  cp_async_wait<0>();

  // c0,c1: token g, weights 2t4, 2t4+1; c2,c3: token g+8.
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < FI; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int m = m0 + wm + 16 * i + g + 8 * h;
      if (m >= M) continue;
      float* yr = Y + (long long)m * ystride;
#pragma unroll
      for (int j = 0; j < FJ; j++) {
        const int n = n0 + wn + 8 * j + 2 * t4;
        const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (pairs && n + 1 < N) {
          *reinterpret_cast<float2*>(yr + n) = make_float2(v0, v1);
        } else {
          if (n < N) yr[n] = v0;
          if (n + 1 < N) yr[n + 1] = v1;
        }
      }
    }
#endif
}

// Configurations (gemm.go's gemmConfigs mirrors them): name, HM, HN, HK,
// WM, WN, stages, min blocks per multiprocessor.
#define HGEMM(NAME, HM_, HN_, HK_, WM_, WN_, ST_, MINB)                                                         \
  extern "C" __global__ void __launch_bounds__(32 * (HM_ / WM_) * (HN_ / WN_), MINB)                          \
      gemm_h_##NAME(const __half* X, int M, const __half* W, int N, int K, float* Y, int ystride, int pairs) { \
    hgemm_body<HM_, HN_, HK_, WM_, WN_, ST_>(X, M, W, N, K, Y, ystride, pairs);                               \
  }
HGEMM(m128n128k32, 128, 128, 32, 64, 64, 4, 2)
HGEMM(m128n128k64, 128, 128, 64, 64, 64, 3, 2)
HGEMM(m64n64k32, 64, 64, 32, 32, 32, 4, 4)
