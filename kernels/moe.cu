// Mixture-of-experts routing and expert bookkeeping on the device, so that
// a MoE layer's router runs where its hidden state is and only the picks
// (T*k ids and weights) cross to the host: the router's scores (an f32
// GEMV of its own: routing is discrete, and the GEMM's f16 inputs would
// move near-ties), each token's top-k with engine/model's tie rule and
// renormalised softmax weights, and the gather and weighted sum around
// the experts the GPU computes. CPU references: engine/model's pick, and
// kernels/moe_test.go.
#include "common.cuh"

#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#define MOE_NONE 0x7fffffff

// logits[t*E+e] = router[e] . x[t] (+ bias[e] when bias is not null): one
// warp per (token, expert), x and router rows of dim floats (dim a multiple
// of 4, rows 16-byte aligned). The bias is added after the dot product in
// float32, as engine/model adds its router skew to the scores.
extern "C" __global__ void moe_logits(const float* x, const float* router, const float* bias, float* logits, int T,
                                      int E, int dim) {
  PDL_ENTRY();
  const int lane = threadIdx.x & 31;
  const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < (long long)T * E; w += warps) {
    const int t = (int)(w / E), e = (int)(w % E);
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)t * dim);
    const float4* rr = reinterpret_cast<const float4*>(router + (long long)e * dim);
    float acc = 0.f;
    for (int i = lane; i < dim / 4; i += 32) {
      const float4 a = xr[i], b = rr[i];
      acc = fmaf(a.x, b.x, acc);
      acc = fmaf(a.y, b.y, acc);
      acc = fmaf(a.z, b.z, acc);
      acc = fmaf(a.w, b.w, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
      if (bias != nullptr) acc = __fadd_rn(acc, bias[e]);
      logits[(long long)t * E + e] = acc;
    }
  }
}

// ranks_before reports whether (v, i) comes before (bv, bi) in the order
// engine/model's pick ranks experts by: higher score first, the lower index
// on equal scores; MOE_NONE (no candidate yet) comes last.
__device__ __forceinline__ bool ranks_before(float v, int i, float bv, int bi) {
  if (i == MOE_NONE) return false;
  if (bi == MOE_NONE) return true;
  return v > bv || (v == bv && i < bi);
}

// Token blockIdx.x's top k of its E logits, one warp a token: k rounds,
// each the best expert ranked after the previous round's pick, so ids come
// out in engine/model's order (score descending, ties to the lower index)
// with no per-expert marks. NaN scores are never picked; a row with fewer
// than k numbers gets id -1 for the missing picks, which the host refuses.
// weights are the softmax over the picked scores (equal to the softmax
// over all E renormalised over the picks), computed as engine/model does:
// exp of the float32 difference to the best score in float64, summed in
// pick order, divided, rounded to float32.
extern "C" __global__ void moe_topk(const float* logits, int E, int k, int* ids, float* weights) {
  PDL_ENTRY();
  const int t = blockIdx.x, lane = threadIdx.x;
  const float* l = logits + (long long)t * E;
  int* id = ids + (long long)t * k;
  float* wt = weights + (long long)t * k;
  float pv = 0.f;
  int pi = -1;
  for (int j = 0; j < k; j++) {
    float bv = 0.f;
    int bi = MOE_NONE;
    for (int e = lane; e < E; e += 32) {
      const float v = l[e];
      if (isnan(v)) continue;
      const bool after = pi < 0 || v < pv || (v == pv && e > pi);
      if (after && ranks_before(v, e, bv, bi)) bv = v, bi = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ranks_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) {
      id[j] = bi == MOE_NONE ? -1 : bi;
      wt[j] = bv;
    }
    if (bi == MOE_NONE) break;
    pv = bv, pi = bi;
  }
  __syncwarp();
  if (lane != 0) return;
  const float mx = wt[0];
  double sum = 0;
  for (int j = 0; j < k && id[j] >= 0; j++) sum += exp((double)__fsub_rn(wt[j], mx));
  for (int j = 0; j < k; j++) wt[j] = id[j] >= 0 ? (float)(exp((double)__fsub_rn(wt[j], mx)) / sum) : 0.f;
}

// out[p] = x[rows[p]] for n rows of dim floats: a resident expert's tokens
// gathered into one contiguous block for its products.
extern "C" __global__ void moe_gather(const float* x, const int* rows, float* out, int n, int dim) {
  PDL_ENTRY();
  GRID_STRIDE(i, (long long)n * dim) {
    const long long p = i / dim, c = i % dim;
    out[i] = x[(long long)rows[p] * dim + c];
  }
}

// h[t] = (base ? base[t] : h[t]) + sum over j < k with where[t*k+j] >= 0 of
// weights[t*k+j] * out[where[t*k+j]], in pick order: the GPU's experts'
// weighted outputs (out, grouped by expert; where maps a token's pick to
// its row, -1 for a pick the CPU computed) added into the residual, on
// top of the CPU's result (base) where the CPU had picks too.
extern "C" __global__ void moe_combine(float* h, const float* base, const float* out, const float* weights,
                                       const int* where, int T, int k, int dim) {
  PDL_ENTRY();
  GRID_STRIDE(i, (long long)T * dim) {
    const int t = (int)(i / dim), c = (int)(i % dim);
    float acc = 0.f;
    for (int j = 0; j < k; j++) {
      const int p = where[t * k + j];
      if (p >= 0) acc = __fadd_rn(acc, __fmul_rn(weights[t * k + j], out[(long long)p * dim + c]));
    }
    h[i] = __fadd_rn(base != nullptr ? base[i] : h[i], acc);
  }
}

// moe_stage: before the picked expert kernels (gemvq_moe_*) run a token's
// k picks ids of one layer, copies each pick whose expert is in host
// memory into device memory, so that they read it there: a pick's table
// entry (table: E entries of gate, up and down pointers, as theirs) is in
// host memory when it is not 0 and its gate lies outside the device's
// expert memory [dlo, dhi). Block (x, j) copies its share of pick j's
// three matrices (gb, ub and db bytes, each a multiple of 16 at a 16-byte
// aligned address) to slot j (slot bytes from slots; the matrices at 0,
// uo and dof in it); block (0, j) writes pick j's entry of out, the table
// the picked kernels then read for these picks (no other entry of out is
// read): its slot's where staged, table's otherwise. Why: the picked
// kernels reading host memory as they compute leave PCIe mostly idle at
// one or two host picks a layer (each block's few loads in flight wait
// the link's latency); a copy spread over every block keeps many more
// in flight, and the reads from device memory after it cost little.
#define MOE_STAGE_U 4
extern "C" __global__ void __launch_bounds__(256)
    moe_stage(const unsigned long long* table, const int* ids, int E, unsigned long long dlo, unsigned long long dhi,
              unsigned long long* out, uint8_t* slots, long long slot, long long gb, long long ub, long long db,
              long long uo, long long dof) {
  PDL_ENTRY();
  const int j = blockIdx.y;
  const int e = ids[j];
  if (e < 0 || e >= E) return;
  const unsigned long long* t = table + 3LL * e;
  const unsigned long long g = t[0];
  const bool host = g != 0 && (g < dlo || g >= dhi);
  uint8_t* dst = slots + (long long)j * slot;
  if (blockIdx.x == 0 && threadIdx.x < 3) {
    const long long off = threadIdx.x == 0 ? 0 : (threadIdx.x == 1 ? uo : dof);
    out[3LL * e + threadIdx.x] = host ? (unsigned long long)(dst + off) : t[threadIdx.x];
  }
  if (!host) return;
  const long long sizes[3] = {gb, ub, db}, offs[3] = {0, uo, dof};
  const long long step = (long long)gridDim.x * blockDim.x * MOE_STAGE_U;
#pragma unroll
  for (int m = 0; m < 3; m++) {
    const uint4* src = reinterpret_cast<const uint4*>(t[m]);
    uint4* to = reinterpret_cast<uint4*>(dst + offs[m]);
    const long long n = sizes[m] >> 4;
    for (long long i = (long long)blockIdx.x * blockDim.x * MOE_STAGE_U + threadIdx.x; i < n; i += step) {
      // Every load of the round before any store: MOE_STAGE_U reads of
      // the link in flight a thread.
      uint4 v[MOE_STAGE_U];
#pragma unroll
      for (int u = 0; u < MOE_STAGE_U; u++) {
        const long long q = i + (long long)u * blockDim.x;
        if (q < n) v[u] = src[q];
      }
#pragma unroll
      for (int u = 0; u < MOE_STAGE_U; u++) {
        const long long q = i + (long long)u * blockDim.x;
        if (q < n) to[q] = v[u];
      }
    }
  }
}
