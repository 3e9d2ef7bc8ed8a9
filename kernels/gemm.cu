// Tensor-core GEMM for prefill and batched passes: Y[m][n] = W[n] . X[m]
// for M activation rows (tokens) against N weight rows, dequantizing W on
// the fly.
//
// Block tile: 128 weight rows x BN tokens (BN = 128), k in steps of 32;
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
// fragments with FMAs. Measured on the H200 (NOTES.md): BN = 128 beat
// BN = 64 (1.6x at 512 tokens) at two blocks per multiprocessor.
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
