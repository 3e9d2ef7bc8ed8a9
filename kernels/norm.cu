// RMSNorm: y = x / rms(x) * w per row, as engine/model's rmsNorm: the sum
// of squares is accumulated in float64, the scale and products in float32
// with explicit (unfused) rounding. y may alias x. One block per row (up
// to 1024 threads, normThreads in ops.go).
#include "common.cuh"

// One row per block. ADD: x += a first (the residual update, stored, as
// elementwise.cu's add), then the norm of the updated x. XQ, when not
// null, also receives y quantized for the integer GEMVs (common.cuh's
// layout, row r at XQ + r*gemvq_bytes(dim); the launcher passes it only
// for dim % 256 == 0 and 16-byte aligned rows).
// FX (with ADD): what is added comes from af, GEMV fixed-point
// accumulators (common.cuh's gemv_unfx; GEMVSliced's output), not a; they
// are left as they are (the next GEMVSliced into the other ones zeroes
// them: a single block's time is its bytes, and writing zeros back here
// would add to every layer).
template <bool ADD, bool FX = false>
__device__ __forceinline__ void rmsnorm_row(float* x, const float* a, const float* w, float* y, int dim,
                                            float eps, uint8_t* XQ, const long long* af = nullptr) {
  __shared__ double part[32];
  __shared__ float inv_s;
  float* xr = x + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  const float* ar = ADD && !FX ? a + (long long)blockIdx.x * dim : nullptr;
  const long long* afr = FX ? af + (long long)blockIdx.x * dim : nullptr;
  // float4 accesses when every row is 16-byte aligned (always, from
  // strata's buffers), else scalar.
  const bool vec = ((dim & 3) == 0) && ((((uintptr_t)x | (uintptr_t)y | (uintptr_t)w | (uintptr_t)a | (uintptr_t)af) & 15) == 0);
  double ss = 0;
  if (vec) {
    float4* x4 = reinterpret_cast<float4*>(xr);
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
      float4 f = x4[i];
      if (ADD) {
        float4 d;
        if (FX) {
          const longlong2* a2 = reinterpret_cast<const longlong2*>(afr) + 2 * i;
          const longlong2 p = a2[0], q = a2[1];
          d = make_float4(gemv_unfx(p.x), gemv_unfx(p.y), gemv_unfx(q.x), gemv_unfx(q.y));
        } else {
          d = reinterpret_cast<const float4*>(ar)[i];
        }
        f.x = __fadd_rn(f.x, d.x), f.y = __fadd_rn(f.y, d.y), f.z = __fadd_rn(f.z, d.z), f.w = __fadd_rn(f.w, d.w);
        x4[i] = f;
      }
      ss += (double)f.x * f.x;
      ss += (double)f.y * f.y;
      ss += (double)f.z * f.z;
      ss += (double)f.w * f.w;
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      float f = xr[i];
      if (ADD) {
        float d;
        if (FX) {
          d = gemv_unfx(afr[i]);
        } else {
          d = ar[i];
        }
        f = __fadd_rn(f, d);
        xr[i] = f;
      }
      const double v = f;
      ss += v * v;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int i = 0; i < (int)(blockDim.x + 31) / 32; i++) t += part[i];
    const float mean = (float)(t / dim);
    inv_s = (float)(1.0 / sqrt((double)(mean + eps)));
  }
  __syncthreads();
  const float inv = inv_s;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* y4 = reinterpret_cast<float4*>(yr);
    // dim % 64 == 0 with XQ: the 16 threads of a half-warp cover one
    // 64-block together in every iteration (blockDim is a multiple of 32).
    uint8_t* xq = (XQ != nullptr && (dim & 63) == 0) ? XQ + (long long)blockIdx.x * gemvq_bytes(dim) : nullptr;
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
      const float4 f = x4[i], g = w4[i];
      const float4 o = make_float4(__fmul_rn(__fmul_rn(f.x, inv), g.x), __fmul_rn(__fmul_rn(f.y, inv), g.y),
                                   __fmul_rn(__fmul_rn(f.z, inv), g.z), __fmul_rn(__fmul_rn(f.w, inv), g.w));
      y4[i] = o;
      if (xq != nullptr) gemvq_put4(xq, dim, i, o);
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
  }
}

extern "C" __global__ void __launch_bounds__(1024) rmsnorm(const float* x, const float* w, float* y, int dim,
                                                          float eps, uint8_t* XQ) {
  PDL_ENTRY();
  rmsnorm_row<false>(const_cast<float*>(x), nullptr, w, y, dim, eps, XQ);
}

// Residual add fused with the next norm: x += a, y = rmsnorm(x) * w (the
// same arithmetic as add then rmsnorm, one launch). y must not alias x.
extern "C" __global__ void __launch_bounds__(1024) add_rmsnorm(float* x, const float* a, const float* w, float* y,
                                                              int dim, float eps, uint8_t* XQ) {
  PDL_ENTRY();
  rmsnorm_row<true>(x, a, w, y, dim, eps, XQ);
}

// add_fx_rmsnorm: add_rmsnorm with what is added in GEMV fixed point
// (GEMVSliced's accumulators, af; rmsnorm_row's FX), left as they are.
extern "C" __global__ void __launch_bounds__(1024) add_fx_rmsnorm(float* x, const long long* af, const float* w, float* y,
                                                                 int dim, float eps, uint8_t* XQ) {
  PDL_ENTRY();
  rmsnorm_row<true, true>(x, nullptr, w, y, dim, eps, XQ, af);
}
