// RMSNorm: y = x / rms(x) * w per row, as engine/model's rmsNorm: the sum
// of squares is accumulated in float64, the scale and products in float32
// with explicit (unfused) rounding. y may alias x. One block per row.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) rmsnorm(const float* x, const float* w, float* y, int dim,
                                                          float eps) {
  __shared__ double part[8];
  __shared__ float inv_s;
  const float* xr = x + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  double ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const double v = xr[i];
    ss += v * v;
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
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}
