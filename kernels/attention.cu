// Attention over the float32 KV cache. Cache layout: per sequence slot,
// [maxCtx][kvdim] keys and values; slot s, position p, KV head g start at
// cache + s*slotStride + p*kvdim + g*hd. Query head h reads KV head
// h/group (GQA). Scores are q.k * scale, optionally soft-capped
// (cap*tanh(s/cap)); keys with pos-kpos >= window are masked when window >
// 0 (gemma2's sliding layers); softmax is computed online (running max and
// sum) in float32. hd must be a multiple of 32 and at most 256: lane l holds
// dims l, l+32, ...
#include "common.cuh"
#include <math_constants.h>

#define MAXD 8  // hd/32 at most
#define AU 4    // keys in flight per warp (decode)

__device__ __forceinline__ float score_cap(float s, float scale, float cap) {
  s *= scale;
  if (cap > 0.0f) s = cap * tanhf(s / cap);
  return s;
}

// attn_put_q writes head h's hd outputs of token t (o, shared memory,
// 16-byte aligned) into the token's quantized x: the first hd/4 threads,
// 4 elements each, half-warps on 64-blocks (gemvq_put4). Called by every
// thread of the block.
__device__ __forceinline__ void attn_put_q(const float* o, uint8_t* XQ, int t, int h, int heads, int hd) {
  __syncthreads();
  const int cols = heads * hd;
  if ((int)threadIdx.x < hd / 4)
    gemvq_put4(XQ + (long long)t * gemvq_bytes(cols), cols, h * hd / 4 + threadIdx.x,
               reinterpret_cast<const float4*>(o)[threadIdx.x]);
}

// Decode: grid (heads, ntok, nsplit), 4 warps. Token t attends to keys
// [lo, pos[t]] of its slot; split z takes keys [lo + z*chunk, lo +
// (z+1)*chunk). Warps stride over the split's keys with their own online
// softmax, merged through shared memory. With nsplit == 1 the block writes
// the output row; otherwise it writes a partial (m, l, acc[hd]) that
// attn_combine merges. XQ (nsplit == 1; else attn_combine's): when not
// null, the output rows are also written quantized for the integer GEMVs
// (common.cuh's layout, token t's row at XQ + t*gemvq_bytes(heads*hd);
// hd % 64 == 0, so every 64-block lies within one head), which saves the
// o projection its quantizing launch.
extern "C" __global__ void __launch_bounds__(128) attn_decode(
    const float* q, float* out, const float* kc, const float* vc, long long slotStride, int kvdim,
    const int* slots, const int* pos, int heads, int group, int hd, float scale, float cap, int window, int chunk,
    float* part, int nsplit, uint8_t* XQ) {
  PDL_ENTRY();
  __shared__ float sm[4], sl[4];
  __shared__ __align__(16) float sacc[4][MAXD * 32];
  const int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nd = hd >> 5;
  const int p = pos[t];
  const int lo = window > 0 ? max(0, p - window + 1) : 0;
  const int k0 = lo + z * chunk, k1 = min(p + 1, lo + (z + 1) * chunk);
  const float* qr = q + ((long long)t * heads + h) * hd;
  float qv[MAXD], acc[MAXD];
#pragma unroll
  for (int i = 0; i < MAXD; i++) {
    qv[i] = i < nd ? qr[lane + 32 * i] : 0.0f;
    acc[i] = 0.0f;
  }
  const long long base = (long long)slots[t] * slotStride + (long long)(h / group) * hd;
  // Keys j = k0+warp, +4, ... in order (one online softmax per warp), AU
  // at a time: their key and value rows are all loaded before the first
  // is used, so a warp waits for memory once per AU keys, not twice per
  // key.
  float m = -CUDART_INF_F, l = 0.0f;
  for (int j0 = k0 + warp; j0 < k1; j0 += 4 * AU) {
    float kb[AU][MAXD], vb[AU][MAXD];
#pragma unroll
    for (int u = 0; u < AU; u++) {
      const int j = j0 + 4 * u;
      const float* kr = kc + base + (long long)j * kvdim;
      const float* vr = vc + base + (long long)j * kvdim;
#pragma unroll
      for (int i = 0; i < MAXD; i++) {
        const bool ok = j < k1 && i < nd;
        kb[u][i] = ok ? kr[lane + 32 * i] : 0.0f;
        vb[u][i] = ok ? vr[lane + 32 * i] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < AU; u++) {
      if (j0 + 4 * u >= k1) break;  // uniform per warp
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < MAXD; i++)
        if (i < nd) s = fmaf(qv[i], kb[u][i], s);
      s = score_cap(warp_sum(s), scale, cap);
      const float mn = fmaxf(m, s);
      const float corr = __expf(m - mn), e = __expf(s - mn);
      l = l * corr + e;
#pragma unroll
      for (int i = 0; i < MAXD; i++)
        if (i < nd) acc[i] = fmaf(e, vb[u][i], acc[i] * corr);
      m = mn;
    }
  }
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int i = 0; i < MAXD; i++)
    if (i < nd) sacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float M = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
  float f[4], L = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; w++) {
    f[w] = sm[w] == -CUDART_INF_F ? 0.0f : __expf(sm[w] - M);
    L += sl[w] * f[w];
  }
  for (int d = threadIdx.x; d < hd; d += 128) {
    const float a = sacc[0][d] * f[0] + sacc[1][d] * f[1] + sacc[2][d] * f[2] + sacc[3][d] * f[3];
    if (nsplit == 1) {
      const float o = L > 0.0f ? a / L : 0.0f;
      out[((long long)t * heads + h) * hd + d] = o;
      sacc[0][d] = o;  // only this thread reads or writes sacc[.][d]
    } else {
      float* pr = part + (((long long)t * heads + h) * nsplit + z) * (hd + 2);
      pr[2 + d] = a;
      if (d == 0) pr[0] = M, pr[1] = L;
    }
  }
  if (nsplit == 1 && XQ != nullptr) attn_put_q(sacc[0], XQ, t, h, heads, hd);
}

// Merges nsplit partials per (token, head): grid (heads, ntok), hd threads;
// XQ as attn_decode's.
extern "C" __global__ void attn_combine(const float* part, float* out, int heads, int hd, int nsplit, uint8_t* XQ) {
  PDL_ENTRY();
  __shared__ __align__(16) float so[MAXD * 32];
  const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  const float* pr = part + ((long long)t * heads + h) * nsplit * (hd + 2);
  float M = -CUDART_INF_F;
  for (int z = 0; z < nsplit; z++) M = fmaxf(M, pr[z * (hd + 2)]);
  float L = 0.0f, a = 0.0f;
  for (int z = 0; z < nsplit; z++) {
    const float mz = pr[z * (hd + 2)];
    if (mz == -CUDART_INF_F) continue;
    const float f = __expf(mz - M);
    L += pr[z * (hd + 2) + 1] * f;
    a += pr[z * (hd + 2) + 2 + d] * f;
  }
  const float o = L > 0.0f ? a / L : 0.0f;
  if (d < hd) out[((long long)t * heads + h) * hd + d] = o, so[d] = o;
  if (XQ != nullptr) attn_put_q(so, XQ, t, h, heads, hd);
}

// Prefill (causal): ntok consecutive tokens of one sequence (slot, first
// position p0). Grid (heads, ceil(ntok/8)), 8 warps = 8 queries of one
// head. Keys are staged KCH at a time in shared memory, shared by the
// block's queries; each warp keeps its own online softmax and masks keys
// after its position (and outside its window).
#define PQ 8
#define KCH 16
extern "C" __global__ void __launch_bounds__(256) attn_prefill(
    const float* q, float* out, const float* kc, const float* vc, long long slotStride, int kvdim, int slot,
    int p0, int ntok, int heads, int group, int hd, float scale, float cap, int window) {
  __shared__ float ks[KCH][MAXD * 32], vs[KCH][MAXD * 32];
  const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nd = hd >> 5;
  const int qt0 = blockIdx.y * PQ;
  const int t = qt0 + warp;
  const bool active = t < ntok;
  const int p = p0 + min(t, ntok - 1);
  const int lo = window > 0 ? max(0, p - window + 1) : 0;
  const int pmax = p0 + min(qt0 + PQ, ntok) - 1;
  const int blo = window > 0 ? max(0, p0 + qt0 - window + 1) : 0;
  float qv[MAXD], acc[MAXD];
  const float* qr = q + ((long long)min(t, ntok - 1) * heads + h) * hd;
#pragma unroll
  for (int i = 0; i < MAXD; i++) {
    qv[i] = i < nd ? qr[lane + 32 * i] : 0.0f;
    acc[i] = 0.0f;
  }
  const long long base = (long long)slot * slotStride + (long long)(h / group) * hd;
  float m = -CUDART_INF_F, l = 0.0f;
  for (int c0 = blo; c0 <= pmax; c0 += KCH) {
    __syncthreads();
    for (int i = threadIdx.x; i < KCH * hd; i += 256) {
      const int j = i / hd, d = i % hd;
      if (c0 + j <= pmax) {
        const long long o = base + (long long)(c0 + j) * kvdim + d;
        ks[j][d] = kc[o];
        vs[j][d] = vc[o];
      }
    }
    __syncthreads();
    const int jn = min(KCH, pmax - c0 + 1);
    for (int j = 0; j < jn; j++) {
      const int kp = c0 + j;
      if (kp < lo || kp > p) continue;  // uniform per warp
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < MAXD; i++)
        if (i < nd) s = fmaf(qv[i], ks[j][lane + 32 * i], s);
      s = score_cap(warp_sum(s), scale, cap);
      const float mn = fmaxf(m, s);
      const float corr = __expf(m - mn), e = __expf(s - mn);
      l = l * corr + e;
#pragma unroll
      for (int i = 0; i < MAXD; i++)
        if (i < nd) acc[i] = fmaf(e, vs[j][lane + 32 * i], acc[i] * corr);
      m = mn;
    }
  }
  if (active) {
    float* o = out + ((long long)t * heads + h) * hd;
#pragma unroll
    for (int i = 0; i < MAXD; i++)
      if (i < nd) o[lane + 32 * i] = acc[i] / l;
  }
}
