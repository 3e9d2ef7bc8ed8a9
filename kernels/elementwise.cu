// Element-wise kernels of the forward pass: gated activations (SwiGLU,
// GeGLU with the tanh approximation), soft-capping, residual adds, and the
// KV-cache store. Transcendentals are evaluated in float64 and rounded, as
// engine/model does, so GPU and CPU agree to an ulp.
#include "common.cuh"

#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// out = silu(gate) * up.
extern "C" __global__ void swiglu(const float* gate, const float* up, float* out, long long n) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) {
    const double v = gate[i];
    out[i] = __fmul_rn((float)(v / (1.0 + exp(-v))), up[i]);
  }
}

// out = gelu_tanh(gate) * up.
extern "C" __global__ void geglu(const float* gate, const float* up, float* out, long long n) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) {
    const double v = gate[i];
    const double c = 0.7978845608028654;  // sqrt(2/pi)
    out[i] = __fmul_rn((float)(0.5 * v * (1.0 + tanh(c * (v + 0.044715 * v * v * v)))), up[i]);
  }
}

// x = cap * tanh(x / cap).
extern "C" __global__ void softcap(float* x, long long n, float cap) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) { x[i] = __fmul_rn((float)tanh((double)__fdiv_rn(x[i], cap)), cap); }
}

// y = a: the hybrid placement's hand-over of the hidden state through
// mapped pinned memory (one side of y, a is host memory the device
// reads or writes over PCIe), which leaves the copy engine to the
// streamed layers.
extern "C" __global__ void copy_f32(float* y, const float* a, long long n) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) { y[i] = a[i]; }
}

// y += a.
extern "C" __global__ void add(float* y, const float* a, long long n) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) { y[i] = __fadd_rn(y[i], a[i]); }
}

// y += a, a in GEMV fixed point (common.cuh's gemv_unfx; GEMVSliced's
// accumulators), zeroed as read for the next product to add into.
extern "C" __global__ void add_fx(float* y, long long* a, long long n) {
  PDL_ENTRY();
  GRID_STRIDE(i, n) {
    const long long v = a[i];
    a[i] = 0;
    y[i] = __fadd_rn(y[i], gemv_unfx(v));
  }
}

// Copies token t's key and value rows (kvdim floats) into its sequence
// slot's cache at position pos[t]: cache + slot[t]*slotStride + pos[t]*kvdim.
extern "C" __global__ void store_kv(const float* k, const float* v, float* kc, float* vc, const int* slot,
                                    const int* pos, int ntok, int kvdim, long long slotStride) {
  PDL_ENTRY();
  const long long n = (long long)ntok * kvdim;
  GRID_STRIDE(i, n) {
    const int t = (int)(i / kvdim), j = (int)(i % kvdim);
    const long long o = (long long)slot[t] * slotStride + (long long)pos[t] * kvdim + j;
    kc[o] = k[i];
    vc[o] = v[i];
  }
}

// Embedding lookup with dequantization: out[t] = table[ids[t]] * scale.
// One block per token; each thread decodes 32-element parts.
template <int T>
__device__ __forceinline__ void embed_body(const uint8_t* table, long long rowBytes, int cols, const int* ids,
                                           float* out, float scale) {
  constexpr int BE = Tr<T>::BE, BB = Tr<T>::BB;
  const int t = blockIdx.x;
  const uint8_t* row = table + (long long)ids[t] * rowBytes;
  float rs = 1.0f;
  if (T == T_INT8) {
    rs = *reinterpret_cast<const float*>(row);
    row += 4;
  }
  float* o = out + (long long)t * cols;
  for (int p = threadIdx.x; p < cols / 32; p += blockDim.x) {
    const int e = 32 * p;
    Part<T> part;
    part.load(row + (long long)(e / BE) * BB, (e % BE) / 32);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      float w[4];
      part.get4(i, w);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        float v = T == T_INT8 ? __fmul_rn(rs, w[k]) : w[k];
        if (scale != 1.0f) v = __fmul_rn(v, scale);
        o[e + 4 * i + k] = v;
      }
    }
  }
}

#define EMBED_TYPE(TY, NAME)                                                                               \
  extern "C" __global__ void embed_##NAME(const uint8_t* table, long long rowBytes, int cols, const int* ids, \
                                          float* out, float scale) {                                       \
    PDL_ENTRY();                                                                                           \
    embed_body<TY>(table, rowBytes, cols, ids, out, scale);                                                \
  }
FOR_EACH_TYPE(EMBED_TYPE)

// read_xor: the XOR of every 16-byte word of up to three ranges (p0, n0
// words; p1, n1; p2, n2), block b's share into out[b] (gridDim.x words; no
// atomics, which would serialize thousands of blocks' results on one
// address), through the streamed loads the integer GEMVs read weights
// with. Why: it reads what a GEMV launch reads and computes nothing, so a
// decode step's GEMV launches replaced one for one by it
// (Kernels.SetGEMVReadOnly) time the ceiling of that launch sequence,
// launch gaps and ramps included, which the engine bench sets the GEMVs
// against. A persistent grid; each thread keeps four loads in flight, its
// first four issued before pdl_wait (no kernel of a step writes weights).
extern "C" __global__ void __launch_bounds__(256) read_xor(const uint4* p0, long long n0, const uint4* p1, long long n1,
                                                          const uint4* p2, long long n2, unsigned* out) {
  __shared__ unsigned part[8];
  const long long n = n0 + n1 + n2, stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  auto at = [&](long long j) -> const uint4* { return j < n0 ? p0 + j : (j < n0 + n1 ? p1 + (j - n0) : p2 + (j - n0 - n1)); };
  uint32_t acc = 0;
  uint4 v[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    if (i + k * stride < n) v[k] = ld_stream(at(i + k * stride));
  pdl_trigger();
  pdl_wait();
  for (; i < n; i += 4 * stride) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const long long j = i + k * stride;
      if (j < n) {
        acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        if (j + 4 * stride < n) v[k] = ld_stream(at(j + 4 * stride));
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) acc ^= part[w];
    out[blockIdx.x] = acc;
  }
}
