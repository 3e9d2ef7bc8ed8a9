// Token selection on the device, so a decode step can stay inside a CUDA
// graph: argmax (lowest index on ties, NaN never chosen over a number, as
// engine/sample) and temperature sampling by inverse CDF with a uniform
// number supplied per row (the host's seeded generator keeps runs
// reproducible). One block of 1024 threads per row.
#include "common.cuh"
#include <math_constants.h>

#define SBLOCK 1024

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (isnan(v)) return false;
  if (isnan(bv)) return true;
  return v > bv || (v == bv && i < bi);
}

// A decode step's argmax runs inside the graph on one row of ~128k logits,
// so the single block must keep many loads in flight: rows that start
// 16-byte aligned are read as float4, four per thread per round (64 KiB in
// flight), several times faster than scalar loads; other rows
// take the scalar loop. Ties go to the lowest index whatever the order in
// which lanes meet them, since better() compares indices.
__device__ __forceinline__ void consider4(float4 v, int i, float& bv, int& bi) {
  if (better(v.x, i, bv, bi)) bv = v.x, bi = i;
  if (better(v.y, i + 1, bv, bi)) bv = v.y, bi = i + 1;
  if (better(v.z, i + 2, bv, bi)) bv = v.z, bi = i + 2;
  if (better(v.w, i + 3, bv, bi)) bv = v.w, bi = i + 3;
}

extern "C" __global__ void __launch_bounds__(SBLOCK) argmax(const float* logits, int vocab, int* out) {
  PDL_ENTRY();
  __shared__ float sv[SBLOCK / 32];
  __shared__ int si[SBLOCK / 32];
  const float* l = logits + (long long)blockIdx.x * vocab;
  float bv = CUDART_NAN_F;
  int bi = 0x7fffffff;
  if ((reinterpret_cast<unsigned long long>(l) & 15) == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int n4 = vocab >> 2;
    int j = threadIdx.x;
    for (; j + 3 * SBLOCK < n4; j += 4 * SBLOCK) {
      const float4 a = __ldg(l4 + j), b = __ldg(l4 + j + SBLOCK), c = __ldg(l4 + j + 2 * SBLOCK),
                   d = __ldg(l4 + j + 3 * SBLOCK);
      consider4(a, 4 * j, bv, bi);
      consider4(b, 4 * (j + SBLOCK), bv, bi);
      consider4(c, 4 * (j + 2 * SBLOCK), bv, bi);
      consider4(d, 4 * (j + 3 * SBLOCK), bv, bi);
    }
    for (; j < n4; j += SBLOCK) consider4(__ldg(l4 + j), 4 * j, bv, bi);
    for (int i = 4 * n4 + threadIdx.x; i < vocab; i += SBLOCK)
      if (better(l[i], i, bv, bi)) bv = l[i], bi = i;
  } else {
    for (int i = threadIdx.x; i < vocab; i += SBLOCK)
      if (better(l[i], i, bv, bi)) bv = l[i], bi = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    bv = sv[0], bi = si[0];
    for (int w = 1; w < SBLOCK / 32; w++)
      if (better(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
    out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
  }
}

// Samples from softmax(logits / temp): p_i = exp((l_i - max)/temp) in
// float64; picks the first index whose running sum exceeds u[row] * total,
// scanning in index order (threads own contiguous chunks). NaN logits get
// probability zero.
extern "C" __global__ void __launch_bounds__(SBLOCK) sample_temp(const float* logits, int vocab, float temp,
                                                                 const float* u, int* out) {
  PDL_ENTRY();
  __shared__ float smax[SBLOCK / 32];
  __shared__ double csum[SBLOCK];
  __shared__ int pick;
  __shared__ double total_s;
  const float* l = logits + (long long)blockIdx.x * vocab;
  float mx = -CUDART_INF_F;
  for (int i = threadIdx.x; i < vocab; i += SBLOCK)
    if (!isnan(l[i])) mx = fmaxf(mx, l[i]);
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) smax[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = smax[0];
  for (int w = 1; w < SBLOCK / 32; w++) mx = fmaxf(mx, smax[w]);
  const int chunk = (vocab + SBLOCK - 1) / SBLOCK;
  const int lo = min(vocab, threadIdx.x * chunk), hi = min(vocab, lo + chunk);
  const double inv = 1.0 / (double)temp;
  double s = 0;
  for (int i = lo; i < hi; i++)
    if (!isnan(l[i])) s += exp(((double)l[i] - (double)mx) * inv);
  csum[threadIdx.x] = s;
  if (threadIdx.x == 0) pick = -1;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive prefix over the 1024 chunk sums
    double run = 0;
    for (int i = 0; i < SBLOCK; i++) {
      const double v = csum[i];
      csum[i] = run;
      run += v;
    }
    total_s = run;
  }
  __syncthreads();
  const double total = total_s;
  const double target = (double)u[blockIdx.x] * total;
  double run = csum[threadIdx.x];
  const double next = threadIdx.x + 1 < SBLOCK ? csum[threadIdx.x + 1] : total;
  if (lo < hi && run <= target && target < next) {
    int chosen = hi - 1;
    for (int i = lo; i < hi; i++) {
      if (isnan(l[i])) continue;
      run += exp(((double)l[i] - (double)mx) * inv);
      if (target < run) {
        chosen = i;
        break;
      }
    }
    atomicMax(&pick, chosen);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int c = pick;
    if (c < 0) {  // target at the very end (u ~ 1): last non-NaN index
      for (int i = vocab - 1; i >= 0; i--)
        if (!isnan(l[i])) { c = i; break; }
    }
    out[blockIdx.x] = c < 0 ? 0 : c;
  }
}
