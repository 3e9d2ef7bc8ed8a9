// Decoder of engine/quant's lossless packed bf16 format (bf16pack.go): the
// sign+mantissa plane, 4-bit exponent codes against a per-block base
// exponent, and escaped exponents listed per block. Streamed bf16 layers
// cross PCIe packed and are decoded on the device just before use.
#include "common.cuh"

#define BF16PACK_BLOCK 256

// One thread decodes 16 values: 16 sign+mantissa bytes (one 16-byte load),
// their 16 codes (8 bytes), 32 bytes of output (two 16-byte stores). A
// packed block of 256 values is one half-warp, so every load of a warp is
// contiguous. Blocks with escapes (rare) find each escape's place in their
// run by a prefix sum of escape counts over the half-warp.
extern "C" __global__ void __launch_bounds__(256) bf16_unpack(const uint8_t* __restrict__ sm,
                                                              const uint8_t* __restrict__ nib,
                                                              const uint8_t* __restrict__ base,
                                                              const uint32_t* __restrict__ escoff,
                                                              const uint8_t* __restrict__ esc,
                                                              uint8_t* __restrict__ out, long long nblocks) {
  const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // 16-value group
  const bool active = g < nblocks * 16;
  const long long b = g >> 4;
  uint4 s = make_uint4(0, 0, 0, 0);
  uint2 c = make_uint2(0, 0);
  uint32_t E = 0, e0 = 0, e1 = 0;
  if (active) {
    s = __ldg(reinterpret_cast<const uint4*>(sm) + g);
    c = __ldg(reinterpret_cast<const uint2*>(nib) + g);
    E = __ldg(base + b);
    e0 = __ldg(escoff + b);
    e1 = __ldg(escoff + b + 1);
  }
  uint32_t k = 0;  // index of this thread's first escape in esc
  const bool anyEsc = __any_sync(0xffffffffu, e1 != e0);
  if (anyEsc) {
    // Escape codes (nibble 15) among this thread's 16.
    uint32_t x = c.x & (c.x >> 1) & (c.x >> 2) & (c.x >> 3) & 0x11111111u;
    uint32_t y = c.y & (c.y >> 1) & (c.y >> 2) & (c.y >> 3) & 0x11111111u;
    const uint32_t cnt = __popc(x) + __popc(y);
    uint32_t inc = cnt;
    const int l16 = threadIdx.x & 15;
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, inc, o, 16);
      if (l16 >= o) inc += v;
    }
    k = e0 + inc - cnt;
  }
  if (!active) return;
  const uint32_t sw[4] = {s.x, s.y, s.z, s.w};
  const uint32_t cw[2] = {c.x, c.y};
  uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 16; j++) {
    const uint32_t byte = (sw[j >> 2] >> (8 * (j & 3))) & 0xffu;
    const uint32_t code = (cw[j >> 3] >> (4 * (j & 7))) & 15u;
    uint32_t e;
    if (code == 15u) {
      e = __ldg(esc + k);
      k++;
    } else {
      e = E - code;
    }
    const uint32_t v = ((byte & 0x80u) << 8) | ((e & 0xffu) << 7) | (byte & 0x7fu);
    if (j & 1) {
      o[j >> 1] |= v << 16;
    } else {
      o[j >> 1] = v;
    }
  }
  uint4* dst = reinterpret_cast<uint4*>(out) + 2 * g;
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}
