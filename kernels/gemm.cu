// Tensor-core GEMM for prefill and batched passes: Y[m][n] = W[n] . X[m]
// for M activation rows (tokens) against N weight rows, dequantizing W on
// the fly. Block tile: 64 weight rows x 64 tokens x 32 k; 128 threads (4
// warps, 2x2, each 32 x 32). Per k-tile, threads 0..63 decode one weight
// row's 32-element part to f16 and threads 64..127 convert one token's 32
// activations to f16, into padded shared tiles (row stride 40 halves: the
// fragment loads hit 32 distinct banks); then each warp issues
// mma.sync.m16n8k16 (f16 in, f32 accumulate) on sm_80 and newer. The
// compute_61 build computes the same fragments with FMAs instead.
// Next k-tile's weight bytes and activations are prefetched into registers
// while the current tile's MMAs run.
#include "common.cuh"

#define BM 64
#define BN 64
#define BK 32
#define LDS 40  // padded row stride in halves

__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int T>
__device__ __forceinline__ void gemm_body(const uint8_t* __restrict__ W, long long rowBytes, int N, int K,
                                          const float* __restrict__ X, int xstride, int M, float* __restrict__ Y,
                                          int ystride) {
  constexpr int BE = Tr<T>::BE, BB = Tr<T>::BB;
  constexpr int DOFF = T == T_INT8 ? 4 : 0;
  __shared__ __align__(16) __half Ws[BM * LDS];
  __shared__ __align__(16) __half Xs[BN * LDS];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * BM, m0 = blockIdx.y * BN;
  const int wn = (warp & 1) * 32, wm = (warp >> 1) * 32;  // warp tile origin (weights, tokens)
  const int g = lane >> 2, t4 = lane & 3;

  // Loader role: rows 0..63 of W (tid < 64) or tokens 0..63 of X.
  const bool wload = tid < 64;
  const int lr = tid & 63;
  const int wrow = n0 + lr, xrow = m0 + lr;
  const uint8_t* wp = W + (long long)min(wrow, N - 1) * rowBytes + DOFF;
  float wscale = 1.0f;
  if (T == T_INT8 && wload && wrow < N) wscale = *reinterpret_cast<const float*>(W + (long long)wrow * rowBytes);
  const float* xp = X + (long long)min(xrow, M - 1) * xstride;

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

  Part<T> part;
  float4 xv[8];
  auto fetch = [&](int k0) {
    if (wload) {
      part.load(wp + (long long)(k0 / BE) * BB, (k0 % BE) / 32);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) xv[i] = __ldg(reinterpret_cast<const float4*>(xp + k0) + i);
    }
  };
  fetch(0);
  for (int k0 = 0; k0 < K; k0 += BK) {
    __syncthreads();  // previous tile's fragments are consumed
    if (wload) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(Ws + lr * LDS);
      const bool ok = wrow < N;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float w[4];
        part.get4(i, w);
        dst[2 * i] = ok ? pack_h2(w[0] * wscale, w[1] * wscale) : 0u;
        dst[2 * i + 1] = ok ? pack_h2(w[2] * wscale, w[3] * wscale) : 0u;
      }
    } else {
      uint32_t* dst = reinterpret_cast<uint32_t*>(Xs + lr * LDS);
      const bool ok = xrow < M;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        dst[2 * i] = ok ? pack_h2(xv[i].x, xv[i].y) : 0u;
        dst[2 * i + 1] = ok ? pack_h2(xv[i].z, xv[i].w) : 0u;
      }
    }
    __syncthreads();
    if (k0 + BK < K) fetch(k0 + BK);

#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const __half* base = Ws + (wn + 16 * i) * LDS + kk;
        a[i][0] = *reinterpret_cast<const uint32_t*>(base + g * LDS + 2 * t4);
        a[i][1] = *reinterpret_cast<const uint32_t*>(base + (g + 8) * LDS + 2 * t4);
        a[i][2] = *reinterpret_cast<const uint32_t*>(base + g * LDS + 2 * t4 + 8);
        a[i][3] = *reinterpret_cast<const uint32_t*>(base + (g + 8) * LDS + 2 * t4 + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const __half* base = Xs + (wm + 8 * j) * LDS + kk;
        b[j][0] = *reinterpret_cast<const uint32_t*>(base + g * LDS + 2 * t4);
        b[j][1] = *reinterpret_cast<const uint32_t*>(base + g * LDS + 2 * t4 + 8);
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
#if __CUDA_ARCH__ >= 800
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};"
              : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
              : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
#else
          (void)a;
          (void)b;
          // Same fragment semantics with FMAs: c[r][c] += sum_k A[r][k] B[k][c].
          const __half* As = Ws + (wn + 16 * i) * LDS + kk;
          const __half* Bs = Xs + (wm + 8 * j) * LDS + kk;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int r = g + 8 * (e >> 1), c = 2 * t4 + (e & 1);
            float s = acc[i][j][e];
            for (int k = 0; k < 16; k++) s = fmaf(__half2float(As[r * LDS + k]), __half2float(Bs[c * LDS + k]), s);
            acc[i][j][e] = s;
          }
#endif
        }
    }
  }

  // c0,c1: weight row g, tokens 2t4, 2t4+1; c2,c3: weight row g+8.
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int n = n0 + wn + 16 * i + g + 8 * (e >> 1);
        const int m = m0 + wm + 8 * j + 2 * t4 + (e & 1);
        if (n < N && m < M) Y[(long long)m * ystride + n] = acc[i][j][e];
      }
}

#define GEMM_TYPE(TY, NAME)                                                                                  \
  extern "C" __global__ void __launch_bounds__(128) gemm_##NAME(const uint8_t* W, long long rowBytes, int N, \
                                                                int K, const float* X, int xstride, int M,  \
                                                                float* Y, int ystride) {                     \
    gemm_body<TY>(W, rowBytes, N, K, X, xstride, M, Y, ystride);                                             \
  }
FOR_EACH_TYPE(GEMM_TYPE)
