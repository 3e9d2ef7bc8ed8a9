// q6ka_check.cpp: kernels' Q6KA device code built for the host and run
// against the Q6_K code it replaces (kernels' TestHostBuildQ6KA builds and
// runs it with g++; no GPU needed). For a Q6_K matrix at every even
// address mod 16, q6ka_relay (gemvq.cu) re-lays it, then every unit read by
// QW6::load_a (gemvq.cu) and DQ6KA::load (gemv.cu) must give QW6::load's
// and DQ6K::load's words, and every part read by Part<T_Q6_KA>
// (common.cuh) Part<T_Q6_K>'s values. The CUDA built-ins the code uses
// are shimmed for one thread in shim.h. dq6.inc is gemv.cu's DQ6K and
// DQ6KA, cut out by the test (the rest of gemv.cu holds PTX-only asm).
#include "shim.h"
#include "gemvq.cu"
#include "dq6.inc"
uint4 q6s[1];  // gemvq_q6k_s's extern __shared__ array, never used here

int main() {
  std::mt19937 rng(7);
  const int nblk = 40;
  alignas(16) static uint8_t orig[nblk * 210 + 64], rel[nblk * 210 + 64];
  for (int off = 0; off < 16; off += 2) {  // the matrix at every even alignment
    uint8_t* o = orig + off; uint8_t* r = rel + off;
    for (int i = 0; i < nblk * 210; i++) o[i] = rng();
    for (int b = 0; b < nblk; b++) { o[b * 210 + 208] = rng(); o[b * 210 + 209] = 0x3c ^ (rng() & 3); }  // d ~ 1
    memcpy(r, o, nblk * 210);
    blockDim.x = 256;
    for (blockIdx.x = 0; blockIdx.x < 1; blockIdx.x++)
      for (threadIdx.x = 0; threadIdx.x < 256; threadIdx.x++) q6ka_relay(r, nblk);
    for (int u = 0; u < 4 * nblk; u++) {
      QW6 a, b; DQ6K da; DQ6KA db;
      a.load(o, u); b.load_a(r, u); da.load(o, u); db.load(r, u);
      for (int i = 0; i < 4; i++) {
        CHECK(a.a[i] == b.a[i] && a.c[i] == b.c[i] && a.hb[i] == b.hb[i], "off %d unit %d word %d: QW6 quants differ", off, u, i);
        CHECK(da.a[i] == db.a[i] && da.c[i] == db.c[i] && da.hb[i] == db.hb[i], "off %d unit %d word %d: DQ6K quants differ", off, u, i);
      }
      CHECK(a.sc == b.sc && a.d == b.d, "off %d unit %d: QW6 sc %08x/%08x d %g/%g", off, u, a.sc, b.sc, a.d, b.d);
      CHECK(da.sc == db.sc && da.d == db.d, "off %d unit %d: DQ6K sc/d differ", off, u);
      for (int i = 0; i < 16; i++) {
        float x[4], y[4]; da.get4(i, x); db.get4(i, y);
        for (int k = 0; k < 4; k++) CHECK(x[k] == y[k], "off %d unit %d: DQ6K get4 differs", off, u);
      }
    }
    for (int bl = 0; bl < nblk; bl++)
      for (int t = 0; t < 8; t++) {
        Part<T_Q6_K> pa; Part<T_Q6_KA> pb;
        pa.load(o + bl * 210, t); pb.load(r + bl * 210, t);
        for (int i = 0; i < 8; i++) {
          float x[4], y[4]; pa.get4(i, x); pb.get4(i, y);
          for (int k = 0; k < 4; k++) CHECK(x[k] == y[k], "off %d block %d part %d elem %d: %g vs %g", off, bl, t, 4 * i + k, x[k], y[k]);
        }
      }
  }
  printf("%s (%d mismatches)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
