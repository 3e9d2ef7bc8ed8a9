// Stand-in for the CUDA toolkit's cuda_fp16.h in q6ka_check.cpp's host build:
// the few half-precision helpers common.cuh uses.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>
struct __half { unsigned short x; };
struct __half2 { __half x, y; };
inline float hc_h2f(unsigned short h) {
  unsigned s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023; float f;
  if (e == 0) f = std::ldexp((float)m, -24); else if (e == 31) f = m ? NAN : INFINITY; else f = std::ldexp((float)(m | 1024), (int)e - 25);
  return s ? -f : f;
}
inline __half __ushort_as_half(unsigned short v) { __half h; h.x = v; return h; }
inline float __half2float(__half h) { return hc_h2f(h.x); }
struct float2 { float x, y; };
inline float2 __half22float2(__half2 h) { return {hc_h2f(h.x.x), hc_h2f(h.y.x)}; }
