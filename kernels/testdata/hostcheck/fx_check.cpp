// fx_check.cpp: the GEMV fixed point (common.cuh's gemv_fx and gemv_unfx,
// kernels' GEMVSliced) and elementwise.cu's add_fx built for the host and
// run (kernels' TestHostBuildFixed; no GPU needed): a slice sum below 2^20
// goes in as round-to-nearest-even of v * 2^32 and a float with |v| >=
// 2^-9 comes back exactly; 2^20 and more, infinities and NaN go in as the
// poison, and any sum holding a poison reads back NaN, even 16 of them
// against 16 of the largest finite sums of the other sign; 16 of the
// largest finite sums read back finite; the order of the additions does
// not change a bit; add_fx adds and zeroes.
#include "shim.h"
#include "common.cuh"
#include "elementwise.cu"

int main() {
  std::mt19937 rng(11);
  const float lim = 1048576.0f, below = std::nextafter(lim, 0.0f);
  // Encoding: nearest even of v * 2^32 below 2^20, the poison from there.
  for (int i = 0; i < 200000; i++) {
    const int e = (int)(rng() % 60) - 40;  // 2^-40 .. 2^19
    float v = std::ldexp((float)(rng() % (1u << 24)) / (1u << 24) + 0.5f, e);
    if (rng() & 1) v = -v;
    const long long want = (long long)std::nearbyint((double)v * 4294967296.0);
    CHECK(gemv_fx(v) == want, "gemv_fx(%a) = %lld, want %lld", v, gemv_fx(v), want);
    if (std::fabs(v) >= 0x1p-9f) CHECK(gemv_unfx(gemv_fx(v)) == v, "round trip of %a: %a", v, gemv_unfx(gemv_fx(v)));
  }
  CHECK(gemv_fx(below) < GEMV_FX_LIMIT / 16, "largest finite sum %a: %lld", below, gemv_fx(below));
  for (float v : {lim, -lim, INFINITY, -INFINITY, NAN}) CHECK(gemv_fx(v) == GEMV_FX_POISON, "gemv_fx(%a) = %lld, want the poison", v, gemv_fx(v));
  // Sums of 16 (a row's most slices).
  long long s = 0;
  for (int i = 0; i < 16; i++) s += gemv_fx(below);
  CHECK(gemv_unfx(s) == 16 * below, "16 x %a read back %a", below, gemv_unfx(s));
  s = 0;
  for (int i = 0; i < 16; i++) s += gemv_fx(-below);
  CHECK(gemv_unfx(s) == -16 * below, "16 x %a read back %a", -below, gemv_unfx(s));
  for (int poisons = 1; poisons <= 16; poisons++) {
    long long t = 0;
    for (int i = 0; i < 16; i++) t += i < poisons ? GEMV_FX_POISON : gemv_fx(-below);
    CHECK(std::isnan(gemv_unfx(t)), "%d poisons among 16: %a, want NaN", poisons, gemv_unfx(t));
    CHECK(t > 0, "%d poisons among 16 wrapped: %lld", poisons, t);
  }
  // Order: 16 slice sums added in 100 random orders give one value.
  float parts[16];
  for (float& p : parts) p = std::ldexp((float)(rng() % (1u << 24)) / (1u << 24) - 0.5f, (int)(rng() % 20) - 10);
  long long first = 0;
  for (int r = 0; r < 100; r++) {
    std::shuffle(parts, parts + 16, rng);
    unsigned long long acc = 0;
    for (float p : parts) atomicAdd(&acc, (unsigned long long)gemv_fx(p));
    if (r == 0) first = (long long)acc;
    CHECK((long long)acc == first, "order %d: %lld, first %lld", r, (long long)acc, first);
  }
  // add_fx: y += unfx(a), a zeroed (one thread walks the whole grid stride).
  const long long n = 1000;
  static float y[1000], want[1000];
  static long long a[1000];
  for (long long i = 0; i < n; i++) {
    y[i] = (float)(rng() % 1000) / 7.0f;
    const float p = (float)(rng() % 100000) / 3.0f - 16000.0f;
    a[i] = gemv_fx(p) + gemv_fx(p / 5.0f);
    want[i] = y[i] + gemv_unfx(a[i]);
  }
  a[7] += GEMV_FX_POISON;
  want[7] = NAN;
  blockDim.x = 1;
  gridDim.x = 1;
  add_fx(y, a, n);
  for (long long i = 0; i < n; i++) {
    CHECK(a[i] == 0, "add_fx left a[%lld] = %lld", i, a[i]);
    CHECK(std::isnan(want[i]) ? std::isnan(y[i]) : y[i] == want[i], "add_fx: y[%lld] = %a, want %a", i, y[i], want[i]);
  }
  printf("%s (%d mismatches)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
