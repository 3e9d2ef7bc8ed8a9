// launch-sweep.cu: the standalone CUDA C++ sweep behind kernels/NOTES.md's
// "GEMV v7" (2026-11-29), kept so its logs (h200-gemv-launch-
// sweep{1..4}.txt) can be reproduced. Not part of the build: it includes
// gemvq.cu for the integer Q4_K unit code and times chains of 32 launches
// per 8b decode shape (and the 4-shape layer chain x 32) from CUDA graphs,
// with and without programmatic dependent launch (PDL), against a
// read-only kernel and the device-to-device copy.
//
// On a GPU host with nvcc (the H200 machine has nvcc 13.0):
//   cd lab/kernels && nvcc -O3 -std=c++17 -arch=sm_90 -I../../kernels -o /tmp/sweep launch-sweep.cu && /tmp/sweep
//
// Variants: k1 = gemvq_fused's block structure (4 rows per block, warps
// split a row's units; pf 1: the first unit's weights loaded before
// griddepcontrol.wait, pf 2: plus an L2 prefetch of the block's rows);
// k2 = persistent warps owning row groups with a one-item register
// prefetch; k3 = persistent warps with a cp.async ring per warp; k5 =
// flat item order across the grid with per-row partial sums; rd = a
// read-only streaming kernel (pf 2: its first loads before the wait).
// "noX" drops the x-quantization launch before each GEMV. The cfgs list
// below is the last sweep's; the earlier ones differed only in that list.
#include "../../kernels/gemvq.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <cstring>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)

__device__ __forceinline__ void pf_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// gemvq_x with a PDL wait.
extern "C" __global__ void __launch_bounds__(256) mx_x(const float* __restrict__ X, int cols, uint8_t* __restrict__ XQ) {
  pdl_trigger();
  pdl_wait();
  const int gw = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int nblk = cols >> 6;
  if (gw >= nblk) return;
  const float2 v = *reinterpret_cast<const float2*>(X + 64 * gw + 2 * lane);
  int q0, q1, s; float sx;
  quant64(v, q0, q1, sx, s);
  put64(XQ, cols, gw, lane, q0, q1, sx, s);
}

// K1: gemvq_fused's plain structure (one matrix), PDL: first unit's weights before the wait.
template <int PF>
__global__ void __launch_bounds__(256) k1(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  constexpr int R = 4;
  __shared__ float red[8 * R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int row0 = blockIdx.x * R;
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; r++) rp[r] = W + (long long)min(row0 + r, rows - 1) * rb;
  float acc[R] = {0, 0, 0, 0};
  const int nunits = cols >> 5;
  int u = warp * 32 + lane;
  QW4 w[R];
  if (u < nunits)
#pragma unroll
    for (int r = 0; r < R; r++) w[r].load(rp[r], u);
  if (PF == 2) {
    const long long rbb = (long long)(cols >> 8) * 144;
    for (int r = 0; r < R; r++)
      for (long long o = 128LL * (warp * 32 + lane); o < rbb; o += 128LL * 32 * nw) pf_l2(rp[r] + o);
  }
  if (PF) { pdl_trigger(); pdl_wait(); }
  for (; u < nunits; u += 32 * nw) {
    QXU x; x.load(XQ, cols, u);
#pragma unroll
    for (int r = 0; r < R; r++) w[r].dot(u, x, acc[r]);
    if (u + 32 * nw < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[r].load(rp[r], u + 32 * nw);
  }
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; r++) red[warp * R + r] = acc[r];
  __syncthreads();
  if (threadIdx.x < R) {
    float s = 0;
    for (int i = 0; i < nw; i++) s += red[i * R + threadIdx.x];
    if (row0 + threadIdx.x < rows) Y[row0 + threadIdx.x] = s;
  }
}

// K2: persistent warps, each owning row groups of R rows; items (group, i) with a one-item register prefetch.
// PF: 0 none, 1 PDL (first item in registers before the wait), 2 PDL + L2 prefetch of the warp's first group.
template <int R, int PF>
__global__ void __launch_bounds__(256) k2(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  const int lane = threadIdx.x & 31;
  const int gw = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (blockDim.x >> 5);
  const int groups = (rows + R - 1) / R;
  const int per = cols >> 10;  // units per lane per group
  int g = gw, i = 0;
  QW4 cur[R];
  auto ld = [&](QW4* w, int g, int i) {
#pragma unroll
    for (int r = 0; r < R; r++) w[r].load(W + (long long)min(g * R + r, rows - 1) * rb, lane + 32 * i);
  };
  if (PF == 2 && g < groups) {
    // whole first group: R rows x rb bytes, 128-byte lines spread over lanes
    for (int r = 0; r < R; r++) {
      const uint8_t* p = W + (long long)min(g * R + r, rows - 1) * rb;
      for (long long o = 128LL * lane; o < rb; o += 32 * 128) pf_l2(p + o);
    }
  }
  if (g < groups) ld(cur, g, 0);
  if (PF) { pdl_trigger(); pdl_wait(); }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0;
  while (g < groups) {
    int g2 = g, i2 = i + 1;
    if (i2 == per) { i2 = 0; g2 += nwarps; }
    QW4 nxt[R];
    if (g2 < groups) ld(nxt, g2, i2);
    QXU x; x.load(XQ, cols, lane + 32 * i);
#pragma unroll
    for (int r = 0; r < R; r++) cur[r].dot(lane + 32 * i, x, acc[r]);
    if (i == per - 1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && g * R + r < rows) Y[g * R + r] = s;
        acc[r] = 0;
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++) cur[r] = nxt[r];
    g = g2; i = i2;
  }
}

// Read-only ceiling: persistent, 4 uint4 loads in flight per thread.
template <int PF>
__global__ void __launch_bounds__(256) rd(const uint4* p, long long n, unsigned* out) {
  uint32_t a = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (PF == 2) {
    uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride), v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
    pdl_trigger(); pdl_wait();
    a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
    i += 4 * stride;
  } else if (PF) { pdl_trigger(); pdl_wait(); }
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride), v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
    a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) { uint4 v = ld_stream(p + i); a ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (a == 0x12345678u) out[0] = a;
}


__device__ __forceinline__ void cp16(void* dst, const void* src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// K3: persistent warps with a per-warp cp.async ring of S items (R rows x 32 units = R x 576 bytes).
template <int R, int S, int PF>
__global__ void __launch_bounds__(256) k3(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ) {
  extern __shared__ uint4 sm[];
  constexpr int STAGE = R * 576;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint8_t* ring = reinterpret_cast<uint8_t*>(sm) + warp * S * STAGE;
  const int gw = blockIdx.x * (blockDim.x >> 5) + warp, nwarps = gridDim.x * (blockDim.x >> 5);
  const int groups = (rows + R - 1) / R;
  const int nunits = cols >> 5, per = (nunits + 31) >> 5;
  const int mygroups = gw < groups ? (groups - gw + nwarps - 1) / nwarps : 0;
  const int nitems = mygroups * per;
  auto issue = [&](int k) {
    if (k < nitems) {
      const int g = gw + (k / per) * nwarps, i = k % per;
      const long long off = (long long)i * 576;
      const int chunks = (int)min(36LL, (rb - off) >> 4);
      uint8_t* dst = ring + (k % S) * STAGE;
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint8_t* src = W + (long long)min(g * R + r, rows - 1) * rb + off;
        for (int c = lane; c < chunks; c += 32) cp16(dst + r * 576 + 16 * c, src + 16 * c);
      }
    }
    cp_commit();
  };
#pragma unroll
  for (int k = 0; k < S - 1; k++) issue(k);
  if (PF) { pdl_trigger(); pdl_wait(); }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0;
  for (int k = 0; k < nitems; k++) {
    cp_wait<S - 2>();
    __syncwarp();
    issue(k + S - 1);
    const int g = gw + (k / per) * nwarps, i = k % per;
    const int u = 32 * i + lane;
    const uint8_t* st = ring + (k % S) * STAGE;
    if (u < nunits) {
      QXU x; x.load(XQ, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) {
        QW4 w;
        const uint8_t* b = st + r * 576 + (lane >> 3) * 144;
        w.h = *reinterpret_cast<const uint4*>(b);
        w.q = *reinterpret_cast<const uint4*>(b + 16 + 16 * (lane & 7));
        w.dot(u, x, acc[r]);
      }
    }
    if (i == per - 1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && g * R + r < rows) Y[g * R + r] = s;
        acc[r] = 0;
      }
    }
  }
  cp_wait<0>();
}


// K5: flat item order (item k = row group k/per, chunk k%per of 32 units), warps take items
// gw, gw+nwarps, ... so the grid's loads in flight form one contiguous window (as rd's);
// one item prefetched ahead in registers; partial sums per (row, chunk) in P, the warp that
// completes a row group (counter) sums them in chunk order and writes Y.
template <int R, int PF>
__global__ void __launch_bounds__(256) k5(const uint8_t* W, long long rb, float* Y, int rows, int cols, const uint8_t* XQ, float* P, int* cnt) {
  const int lane = threadIdx.x & 31;
  const int gw = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = gridDim.x * (blockDim.x >> 5);
  const int groups = (rows + R - 1) / R, nunits = cols >> 5, per = (nunits + 31) >> 5;
  const int nitems = groups * per;
  auto ld = [&](QW4* w, int k) {
    const int g = k / per, u = 32 * (k % per) + lane;
    if (u < nunits)
#pragma unroll
      for (int r = 0; r < R; r++) w[r].load(W + (long long)min(g * R + r, rows - 1) * rb, u);
  };
  QW4 cur[R];
  int k = gw;
  if (k < nitems) ld(cur, k);
  if (PF) { pdl_trigger(); pdl_wait(); }
  for (; k < nitems; k += nwarps) {
    QW4 nxt[R];
    if (k + nwarps < nitems) ld(nxt, k + nwarps);
    const int g = k / per, c = k % per, u = 32 * c + lane;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0;
    if (u < nunits) {
      QXU x; x.load(XQ, cols, u);
#pragma unroll
      for (int r = 0; r < R; r++) cur[r].dot(u, x, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
    if (per == 1) {
      if (lane < R && g * R + lane < rows) {
        float v = acc[0];
#pragma unroll
        for (int r = 1; r < R; r++) if (lane == r) v = acc[r];
        Y[g * R + lane] = v;
      }
    } else {
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++) P[((long long)g * R + r) * per + c] = acc[r];
      __threadfence();
      int last = 0;
      if (lane == 0) last = atomicAdd(&cnt[g], 1) == per - 1;
      last = __shfl_sync(0xffffffffu, last, 0);
      if (last) {
        __threadfence();
#pragma unroll
        for (int r = 0; r < R; r++) {
          float v = lane < per ? __ldcg(&P[((long long)g * R + r) * per + lane]) : 0.0f;
          v = warp_sum(v);
          if (lane == 0 && g * R + r < rows) Y[g * R + r] = v;
        }
        if (lane == 0) cnt[g] = 0;
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++) cur[r] = nxt[r];
  }
}

struct Mat { int rows, cols; uint8_t* w; long long rb; float* y; };

static int SMS;
static bool gPDL;

template <typename... A>
static void launchS(void (*f)(A...), int grid, int block, int smem, cudaStream_t s, bool pdl, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(grid); cfg.blockDim = dim3(block); cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, f, args...));
}
template <typename... A>
static void launch(void (*f)(A...), int grid, int block, cudaStream_t s, bool pdl, A... args) { launchS(f, grid, block, 0, s, pdl, args...); }


// variant ids
enum { V_K1, V_K2R2, V_K2R4, V_RD, V_K3, V_K5R1, V_K5R2, V_K5R4 };
static const char* vname[] = {"k1 (gemvq_fused)", "k2 R=2", "k2 R=4", "read-only", "k3 ring", "k5 flat R=1", "k5 flat R=2", "k5 flat R=4"};

static float* gX; static uint8_t* gXQ; static unsigned* gOut; static float* gP; static int* gCnt;
static int k2blocks = 2, k2threads = 256;
static bool noX;
static int k1warps, k3S = 4;

static void enqueue(int v, bool pdl, int pf, const Mat& m, cudaStream_t s) {
  if (v != V_RD && !noX) launch(mx_x, (m.cols / 64 + 7) / 8, 256, s, pdl, (const float*)gX, m.cols, gXQ);
  switch (v) {
  case V_K1: {
    const int groups = (m.rows + 3) / 4;
    int windows = (m.cols / 32 + 31) / 32, warps = 1;
    while (warps < 8 && 2 * warps <= windows && groups * 2 * warps <= SMS * 32) warps *= 2;
    if (k1warps) warps = k1warps;
    if (pf == 2) launch(k1<2>, groups, 32 * warps, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ);
    else if (pf) launch(k1<1>, groups, 32 * warps, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ);
    else launch(k1<0>, groups, 32 * warps, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ);
    break;
  }
  case V_K2R2: case V_K2R4: {
    const int R = v == V_K2R2 ? 2 : 4;
    const int groups = (m.rows + R - 1) / R;
    int blocks = std::min(SMS * k2blocks, (groups + k2threads / 32 - 1) / (k2threads / 32));
    auto* f = R == 2 ? (pf == 0 ? k2<2, 0> : pf == 1 ? k2<2, 1> : k2<2, 2>) : (pf == 0 ? k2<4, 0> : pf == 1 ? k2<4, 1> : k2<4, 2>);
    launch(f, blocks, k2threads, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ);
    break;
  }
  case V_K3: {
    const int R = 4, groups = (m.rows + R - 1) / R, nw = k2threads / 32;
    int blocks = std::min(SMS * k2blocks, (groups + nw - 1) / nw);
    void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*) =
      k3S == 3 ? (pf ? k3<4, 3, 1> : k3<4, 3, 0>) : k3S == 4 ? (pf ? k3<4, 4, 1> : k3<4, 4, 0>) : k3S == 6 ? (pf ? k3<4, 6, 1> : k3<4, 6, 0>) : (pf ? k3<4, 8, 1> : k3<4, 8, 0>);
    const int smem = nw * k3S * R * 576;
    static bool set[64];
    const int key = k3S * 2 + (pf ? 1 : 0);
    if (!set[key]) { CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024)); set[key] = true; }
    launchS(f, blocks, k2threads, smem, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ);
    break;
  }
  case V_K5R1: case V_K5R2: case V_K5R4: {
    const int R = v == V_K5R1 ? 1 : v == V_K5R2 ? 2 : 4;
    const int groups = (m.rows + R - 1) / R, per = (m.cols / 32 + 31) / 32;
    const int nw = k2threads / 32;
    int blocks = std::min(SMS * k2blocks, (groups * per + nw - 1) / nw);
    void (*f)(const uint8_t*, long long, float*, int, int, const uint8_t*, float*, int*) =
      R == 1 ? (pf ? k5<1, 1> : k5<1, 0>) : R == 2 ? (pf ? k5<2, 1> : k5<2, 0>) : (pf ? k5<4, 1> : k5<4, 0>);
    launch(f, blocks, k2threads, s, pdl, (const uint8_t*)m.w, m.rb, m.y, m.rows, m.cols, (const uint8_t*)gXQ, gP, gCnt);
    break;
  }
  case V_RD:
    if (pf == 2) launch(rd<2>, SMS * 4, 256, s, pdl, (const uint4*)m.w, (long long)(m.rb * m.rows / 16), gOut);
    else if (pf) launch(rd<1>, SMS * 4, 256, s, pdl, (const uint4*)m.w, (long long)(m.rb * m.rows / 16), gOut);
    else launch(rd<0>, SMS * 4, 256, s, pdl, (const uint4*)m.w, (long long)(m.rb * m.rows / 16), gOut);
    break;
  }
}

static double timeChain(const std::vector<Mat>& ms, int v, bool pdl, int pf, cudaStream_t s, int reps = 10) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (auto& m : ms) enqueue(v, pdl, pf, m, s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  float best = 1e30;
  for (int t = 0; t < 3; t++) {
    cudaEventRecord(a, s);
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float ms_; cudaEventElapsedTime(&ms_, a, b);
    best = std::min(best, ms_ / reps);
  }
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return best * 1e-3;
}

int main(int argc, char** argv) {
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); SMS = p.multiProcessorCount;
  printf("%s SMs %d L2 %d MB\n", p.name, SMS, p.l2CacheSize >> 20);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // D2D
  size_t big = 1ull << 30; void *da, *db; CK(cudaMalloc(&da, big)); CK(cudaMalloc(&db, big));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  CK(cudaMemcpyAsync(db, da, big, cudaMemcpyDeviceToDevice, s));
  cudaEventRecord(a, s); for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(db, da, big, cudaMemcpyDeviceToDevice, s)); cudaEventRecord(b, s);
  CK(cudaEventSynchronize(b)); float ms; cudaEventElapsedTime(&ms, a, b);
  const double d2d = 2.0 * big * 10 / (ms * 1e-3) / 1e9;
  printf("D2D %.0f GB/s (read+write)\n", d2d);
  CK(cudaFree(da)); CK(cudaFree(db));
  CK(cudaMalloc(&gX, 4 * 65536)); CK(cudaMalloc(&gXQ, 3 * 65536)); CK(cudaMalloc(&gOut, 64)); CK(cudaMalloc(&gP, 4 << 24)); CK(cudaMalloc(&gCnt, 4 << 16)); CK(cudaMemset(gCnt, 0, 4 << 16));
  {
    std::vector<float> hx(16384); for (auto& v : hx) v = (rand() / (float)RAND_MAX) - 0.5f;
    CK(cudaMemcpy(gX, hx.data(), 4 * 16384, cudaMemcpyHostToDevice));
  }
  // 32 layers: qkv 6144x4096, o 4096x4096, gate+up 28672x4096, down 4096x14336 (all Q4_K)
  int shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  const char* sname[4] = {"qkv 6144x4096", "o 4096x4096", "gate+up 28672x4096", "down 4096x14336"};
  std::vector<Mat> layer[4];
  double bytes[4] = {0};
  for (int L = 0; L < 32; L++)
    for (int k = 0; k < 4; k++) {
      Mat m; m.rows = shapes[k][0]; m.cols = shapes[k][1]; m.rb = (long long)m.cols / 256 * 144;
      size_t n = m.rb * m.rows; CK(cudaMalloc(&m.w, n)); CK(cudaMalloc(&m.y, 4 * m.rows));
      // random bytes with d=dmin=small halves
      std::vector<uint8_t> h(n); for (size_t i = 0; i < n; i++) h[i] = (uint8_t)(rand() >> 7);
      for (size_t o = 0; o < n; o += 144) { h[o] = 0x10; h[o + 1] = 0x00; h[o + 2] = 0x08; h[o + 3] = 0x00; }
      CK(cudaMemcpy(m.w, h.data(), n, cudaMemcpyHostToDevice));
      layer[k].push_back(m); bytes[k] += n;
    }
  // correctness: compare k2 outputs vs k1 on one matrix per shape
  for (int k = 0; k < 4; k++) {
    Mat m = layer[k][0]; std::vector<float> y1(m.rows), y2(m.rows);
    enqueue(V_K1, false, 0, m, s); CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(y1.data(), m.y, 4 * m.rows, cudaMemcpyDeviceToHost));
    for (int v : {V_K3, V_K5R1, V_K5R2, V_K5R4}) {
      k2blocks = 2; k2threads = 128; k3S = 4;
      CK(cudaMemset(m.y, 0, 4 * m.rows));
      enqueue(v, true, 2, m, s); CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(y2.data(), m.y, 4 * m.rows, cudaMemcpyDeviceToHost));
      double e = 0, n2 = 0; for (int i = 0; i < m.rows; i++) { e += (y1[i] - y2[i]) * (double)(y1[i] - y2[i]); n2 += y1[i] * (double)y1[i]; }
      printf("check %s %s: nmse %.3g (|y|^2 %.3g)\n", sname[k], vname[v], e / n2, n2);
    }
  }
  const char* only = argc > 1 ? argv[1] : "";
  (void)only;
  struct Cfg { int v; bool pdl; int pf; int blocks, threads; bool nox = false; int kw = 0; int S = 4; };
  std::vector<Cfg> cfgs = {
    {V_RD, true, 2, 0, 0},
    {V_K1, true, 1, 0, 0, true, 2},
    {V_K5R1, true, 1, 4, 256, true}, {V_K5R1, true, 1, 8, 256, true},
    {V_K5R2, true, 1, 4, 256, true}, {V_K5R2, true, 1, 6, 256, true},
    {V_K5R4, true, 1, 2, 256, true}, {V_K5R4, true, 1, 3, 256, true}, {V_K5R4, true, 1, 4, 128, true},
    {V_K5R2, false, 0, 4, 256, true}, {V_K5R2, true, 1, 4, 256, false},
    {V_K1, true, 1, 0, 0, true, 8}, {V_K1, true, 1, 0, 0, true, 1},
  };
  printf("%-26s %-9s", "variant", "pdl/pf");
  for (int k = 0; k < 4; k++) printf(" %22s", sname[k]);
  printf(" %22s\n", "layer chain x32");
  std::vector<Mat> all;
  for (int L = 0; L < 32; L++) for (int k = 0; k < 4; k++) all.push_back(layer[k][L]);
  const double tot = bytes[0] + bytes[1] + bytes[2] + bytes[3];
  for (auto& c : cfgs) {
    k2blocks = c.blocks; k2threads = c.threads; noX = c.nox; k1warps = c.kw; k3S = c.S;
    char nm[64]; snprintf(nm, 64, "%s b%d t%d%s", vname[c.v], c.blocks, c.threads, c.nox ? " noX" : "");
    if (c.kw) snprintf(nm + strlen(nm), 16, " w%d", c.kw);
    if (c.v == V_K3) snprintf(nm + strlen(nm), 16, " S%d", c.S);
    printf("%-26s %d/%d      ", nm, c.pdl, c.pf);
    for (int k = 0; k < 4; k++) {
      double t = timeChain(layer[k], c.v, c.pdl, c.pf, s);
      printf(" %7.2fus %5.3f      ", t / 32 * 1e6, bytes[k] / t / 1e9 / d2d);
    }
    double t = timeChain(all, c.v, c.pdl, c.pf, s, 5);
    printf(" %7.1fus %5.3f\n", t / 32 * 1e6, tot / t / 1e9 / d2d);
    fflush(stdout);
  }
  return 0;
}
