// Causal prefill attention over the float32 KV cache, tiled so every key
// and value read from memory is reused by many queries (attention.cu's
// attn_prefill reads the keys once per 8 queries and spends a 5-shuffle
// warp sum, two exps and an online-softmax update on every (query, key)
// pair). Same semantics as attn_prefill: ntok consecutive tokens of one
// sequence (cache slot `slot`, first position p0), whose keys and values
// are already stored; token i at position p0+i attends to keys
// [max(0, p0+i-window+1) if window > 0, else 0, p0+i]; query head h reads
// KV head h/group; score = q.k * scale, soft-capped to cap*tanh(s/cap)
// when cap > 0; softmax and every sum in float32 (fidelity budget: these
// results feed logits compared with the CPU at NMSE <= 1e-4).
//
// Block: one KV head x one tile of BR = 64 query rows, a row being a
// (token, query head of the group) pair, rows numbered token*group + g,
// so all heads sharing the KV head reuse each staged key and value. 256
// threads as 16 x 16: thread (ty, tx) owns rows ty*4 .. ty*4+3 and
//   - scores: keys tx + 16*j of the key tile (j < BC/16), a 4 x BC/16
//     register tile accumulated over the head dim from shared memory
//     (float4 reads: Q rows broadcast, K rows padded by 4 floats so the 8
//     keys of a quarter warp fall in distinct bank groups); no shuffles;
//   - softmax: one max over the row's 16 lanes (4 xor shuffles) per tile,
//     exp2 of log2-scaled scores, each lane keeps its own partial row sum
//     (reduced once at the end); P goes to shared memory as [key][row];
//   - P.V: dims (tx + 16*k)*4 .. +3 (k < ND/2), per key one float4 of P
//     (4 rows) and ND/2 float4s of V: 16 FMAs per shared load.
// Pipeline: K of tile n+1 is copied (cp.async, zero-filled past the last
// key and past hd) while P.V of tile n runs, V of tile n while its scores
// run; two barriers per tile. Key tiles cover only [block's lowest key,
// block's highest key]; tiles inside every row's causal/window range skip
// the mask.
//
// Causal work grows with the tile index; blocks are issued heaviest first,
// and with pair != 0 each block takes tile y and tile ntiles-1-y in turn
// (equal work per block: one wave of equal blocks when the grid is small).
//
// ND = padded head dim / 32 (2, 4, 8: hd <= 64, 128, 256); padded dims are
// zero in Q, K and V and never written. compute_61 builds use plain loads
// instead of cp.async (the Go side uses attn_prefill there: Pascal has no
// 48+ KiB shared memory).
#include "common.cuh"
#include <math_constants.h>

#define PF_BR 64
#define PF_NT 256
#define PF_LOG2E 1.4426950408889634f

__device__ __forceinline__ void pf_cp16(float* dst, const float* src, bool ok) {
#if __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0) : "memory");
#else
  *(float4*)dst = ok ? *(const float4*)src : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
}

// Waits for this thread's copies; a barrier must follow before other
// threads read them.
__device__ __forceinline__ void pf_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Stages rows [k0, k0+ROWS) of one KV head (row stride kvdim floats from
// g) into s (row stride LD floats); rows >= kend and dims >= hd are zero.
template <int ND, int ROWS>
__device__ __forceinline__ void pf_stage(float* s, const float* g, int kvdim, int k0, int kend, int hd) {
  constexpr int C4 = ND * 8, LD = ND * 32 + 4;
#pragma unroll
  for (int it = 0; it < ROWS * C4 / PF_NT; it++) {
    const int i = threadIdx.x + it * PF_NT;
    const int r = i / C4, c = i % C4;
    const bool ok = k0 + r < kend && c * 4 < hd;
    pf_cp16(s + r * LD + c * 4, ok ? g + (long long)(k0 + r) * kvdim + c * 4 : g, ok);
  }
}

template <int ND, int BC>
__device__ __forceinline__ void pf_tile(const float* __restrict__ q, float* __restrict__ out, const float* kg,
                                        const float* vg, int kvdim, int p0, int ntok, int heads, int group, int hd,
                                        float scale, float cap, int window, int tile, float* smem) {
  constexpr int BR = PF_BR, C4 = ND * 8, LD = ND * 32 + 4, PLD = BR + 4, TC = BC / 16, DV = ND / 2;
  float* Qs = smem;
  float* Ks = Qs + BR * LD;
  float* Vs = Ks + BC * LD;
  float* Ps = Vs + BC * LD;  // [BC][PLD]: P of key j, rows
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int kvh = blockIdx.x;
  const int nrows = ntok * group;
  const int f0 = tile * BR;
  const int t_lo = f0 / group, t_hi = min(f0 + BR, nrows) - 1;
  const int khi = p0 + t_hi / group;  // last key any row needs
  const int pmin = p0 + t_lo;         // smallest row position
  const int klo = window > 0 ? max(0, pmin - window + 1) : 0;

  // Q rows (zero past ntok and hd), then the first key tile: one group.
#pragma unroll
  for (int it = 0; it < BR * C4 / PF_NT; it++) {
    const int i = threadIdx.x + it * PF_NT;
    const int r = i / C4, c = i % C4;
    const int f = f0 + r;
    const bool ok = f < nrows && c * 4 < hd;
    const float* src = q;
    if (ok) {
      const int t = f / group, g = f - t * group;
      src = q + ((long long)t * heads + kvh * group + g) * hd + c * 4;
    }
    pf_cp16(Qs + r * LD + c * 4, src, ok);
  }
  pf_stage<ND, BC>(Ks, kg, kvdim, klo, khi + 1, hd);

  int rp[4], rlo[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int f = min(f0 + ty * 4 + i, nrows - 1);
    rp[i] = p0 + f / group;
    rlo[i] = window > 0 ? rp[i] - window + 1 : 0;
  }
  const float sl2 = scale * PF_LOG2E;
  float acc[4][DV][4], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m[i] = -CUDART_INF_F;
    l[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < DV; k++) acc[i][k][0] = acc[i][k][1] = acc[i][k][2] = acc[i][k][3] = 0.0f;
  }

  for (int c0 = klo; c0 <= khi; c0 += BC) {
    pf_wait();
    __syncthreads();  // K (and Q) landed; the previous tile's P.V is done
    pf_stage<ND, BC>(Vs, vg, kvdim, c0, khi + 1, hd);

    float s[4][TC];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < TC; j++) s[i][j] = 0.0f;
    const float4* q4 = (const float4*)(Qs + ty * 4 * LD);
    const float4* k4 = (const float4*)(Ks + tx * LD);
#pragma unroll 8
    for (int d4 = 0; d4 < C4; d4++) {
      float4 a[4], b[TC];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = q4[i * (LD / 4) + d4];
#pragma unroll
      for (int j = 0; j < TC; j++) b[j] = k4[j * 16 * (LD / 4) + d4];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < TC; j++) {
          s[i][j] = fmaf(a[i].x, b[j].x, s[i][j]);
          s[i][j] = fmaf(a[i].y, b[j].y, s[i][j]);
          s[i][j] = fmaf(a[i].z, b[j].z, s[i][j]);
          s[i][j] = fmaf(a[i].w, b[j].w, s[i][j]);
        }
    }

    // Scale, cap, mask (log2 domain), online softmax.
    const bool full = c0 + BC - 1 <= pmin && (window <= 0 || c0 >= khi - window + 1);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float mx = -CUDART_INF_F;
#pragma unroll
      for (int j = 0; j < TC; j++) {
        float x;
        if (cap > 0.0f) {
          x = cap * tanhf(s[i][j] * scale / cap) * PF_LOG2E;
        } else {
          x = s[i][j] * sl2;
        }
        if (!full) {
          const int kp = c0 + tx + 16 * j;
          if (kp > rp[i] || kp < rlo[i]) x = -CUDART_INF_F;
        }
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mn = fmaxf(m[i], mx);
      const float base = mn == -CUDART_INF_F ? 0.0f : mn;
      const float corr = exp2f(m[i] - base);
      m[i] = mn;
      float ls = 0.0f;
#pragma unroll
      for (int j = 0; j < TC; j++) {
        s[i][j] = exp2f(s[i][j] - base);
        ls += s[i][j];
      }
      l[i] = fmaf(l[i], corr, ls);
#pragma unroll
      for (int k = 0; k < DV; k++) {
        acc[i][k][0] *= corr;
        acc[i][k][1] *= corr;
        acc[i][k][2] *= corr;
        acc[i][k][3] *= corr;
      }
    }
#pragma unroll
    for (int j = 0; j < TC; j++)
      *(float4*)(Ps + (tx + 16 * j) * PLD + ty * 4) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);

    pf_wait();
    __syncthreads();  // V landed, P written, every thread done with K
    if (c0 + BC <= khi) pf_stage<ND, BC>(Ks, kg, kvdim, c0 + BC, khi + 1, hd);

    const float* pr = Ps + ty * 4;
    const float* vr = Vs + tx * 4;
#pragma unroll 16
    for (int j = 0; j < BC; j++) {
      const float4 p = *(const float4*)(pr + j * PLD);
#pragma unroll
      for (int k = 0; k < DV; k++) {
        const float4 v = *(const float4*)(vr + j * LD + k * 64);
        acc[0][k][0] = fmaf(p.x, v.x, acc[0][k][0]);
        acc[0][k][1] = fmaf(p.x, v.y, acc[0][k][1]);
        acc[0][k][2] = fmaf(p.x, v.z, acc[0][k][2]);
        acc[0][k][3] = fmaf(p.x, v.w, acc[0][k][3]);
        acc[1][k][0] = fmaf(p.y, v.x, acc[1][k][0]);
        acc[1][k][1] = fmaf(p.y, v.y, acc[1][k][1]);
        acc[1][k][2] = fmaf(p.y, v.z, acc[1][k][2]);
        acc[1][k][3] = fmaf(p.y, v.w, acc[1][k][3]);
        acc[2][k][0] = fmaf(p.z, v.x, acc[2][k][0]);
        acc[2][k][1] = fmaf(p.z, v.y, acc[2][k][1]);
        acc[2][k][2] = fmaf(p.z, v.z, acc[2][k][2]);
        acc[2][k][3] = fmaf(p.z, v.w, acc[2][k][3]);
        acc[3][k][0] = fmaf(p.w, v.x, acc[3][k][0]);
        acc[3][k][1] = fmaf(p.w, v.y, acc[3][k][1]);
        acc[3][k][2] = fmaf(p.w, v.z, acc[3][k][2]);
        acc[3][k][3] = fmaf(p.w, v.w, acc[3][k][3]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    float L = l[i];
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    const int f = f0 + ty * 4 + i;
    if (f < nrows) {
      const int t = f / group, g = f - t * group;
      float* o = out + ((long long)t * heads + kvh * group + g) * hd;
      const float inv = 1.0f / L;
#pragma unroll
      for (int k = 0; k < DV; k++) {
        const int d = (tx + 16 * k) * 4;
        if (d < hd) *(float4*)(o + d) = make_float4(acc[i][k][0] * inv, acc[i][k][1] * inv, acc[i][k][2] * inv, acc[i][k][3] * inv);
      }
    }
  }
  __syncthreads();  // the next tile (pair mode) restages Q and K
}

// Grid (KV heads, tiles or ceil(tiles/2) with pair), 256 threads, dynamic
// shared memory 4*(64*LD + 2*BC*LD + BC*68) bytes, LD = ND*32+4.
#define PF_KERNEL(ND, BC, MINB)                                                                                    \
  extern "C" __global__ void __launch_bounds__(PF_NT, MINB) attn_prefill_f32_d##ND##_k##BC(                        \
      const float* __restrict__ q, float* __restrict__ out, const float* __restrict__ kc,                          \
      const float* __restrict__ vc, long long slotStride, int kvdim, int slot, int p0, int ntok, int heads,         \
      int group, int hd, float scale, float cap, int window, int ntiles, int pair) {                               \
    extern __shared__ float4 pf_smem4[];                                                                           \
    const long long base = (long long)slot * slotStride + (long long)blockIdx.x * hd;                              \
    const int y = blockIdx.y;                                                                                      \
    const int first = pair ? y : ntiles - 1 - y;                                                                   \
    pf_tile<ND, BC>(q, out, kc + base, vc + base, kvdim, p0, ntok, heads, group, hd, scale, cap, window, first,     \
                    (float*)pf_smem4);                                                                             \
    if (pair && ntiles - 1 - y != y)                                                                               \
      pf_tile<ND, BC>(q, out, kc + base, vc + base, kvdim, p0, ntok, heads, group, hd, scale, cap, window,          \
                      ntiles - 1 - y, (float*)pf_smem4);                                                           \
  }

// Key tiles of 64 (prefillBC in attention_prefill.go): tiles of 32 were
// no faster at long prompts and slower at short ones.
PF_KERNEL(2, 64, 2)
PF_KERNEL(4, 64, 1)
PF_KERNEL(8, 64, 1)
