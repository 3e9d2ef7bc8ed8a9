// Rotary position embedding, in place on rows of heads*hd floats (q or k).
// Angles are pos * freq[i] in float64 (freq already divided by llama3's
// per-pair factors on the host), cos/sin in float64 rounded to float32, and
// the rotation in float32 with unfused products: engine/model's arithmetic.
// neox = 0: adjacent pairs (x[2i], x[2i+1]) (llama after the GGUF
// permutation); neox = 1: pairs (x[i], x[i+hd/2]) (gemma2, HF rotate_half).
#include "common.cuh"

extern "C" __global__ void rope(float* x, int ntok, int nheads, int hd, int rowStride, const int* pos,
                                const double* freq, int neox) {
  PDL_ENTRY();
  const int half = hd / 2;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long total = (long long)ntok * nheads * half;
  if (idx >= total) return;
  const int i = (int)(idx % half);
  const int h = (int)((idx / half) % nheads);
  const int t = (int)(idx / ((long long)half * nheads));
  double s, c;
  sincos((double)pos[t] * freq[i], &s, &c);
  const float cf = (float)c, sf = (float)s;
  float* r = x + (long long)t * rowStride + h * hd;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = r[a], x1 = r[b];
  r[a] = __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
  r[b] = __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
}

// RoPE of q and k fused with the KV-cache store (rope, rope, store_kv in
// one launch, the same arithmetic): rotates q in place (ntok rows of
// heads*hd, stride qStride), rotates k (kvheads*hd = kvdim floats per
// row) in place and into the cache, and copies v into the cache: token t
// at slot[t], position pos[t] (cache + slot*slotStride + pos*kvdim).
extern "C" __global__ void rope_store(float* q, float* k, const float* v, float* kc, float* vc, int ntok, int heads,
                                      int kvheads, int hd, int qStride, const int* pos, const int* slot,
                                      const double* freq, int neox, long long slotStride) {
  PDL_ENTRY();
  const int half = hd / 2, kvdim = kvheads * hd;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nrot = (long long)ntok * (heads + kvheads) * half;
  if (idx >= nrot) {
    const long long j = idx - nrot;
    if (j >= (long long)ntok * kvdim) return;
    const int t = (int)(j / kvdim), e = (int)(j % kvdim);
    vc[(long long)slot[t] * slotStride + (long long)pos[t] * kvdim + e] = v[j];
    return;
  }
  const int i = (int)(idx % half);
  const int hh = (int)((idx / half) % (heads + kvheads));
  const int t = (int)(idx / ((long long)half * (heads + kvheads)));
  double s, c;
  sincos((double)pos[t] * freq[i], &s, &c);
  const float cf = (float)c, sf = (float)s;
  const bool isq = hh < heads;
  float* r = isq ? q + (long long)t * qStride + hh * hd : k + (long long)t * kvdim + (hh - heads) * hd;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = r[a], x1 = r[b];
  const float y0 = __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
  const float y1 = __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
  r[a] = y0;
  r[b] = y1;
  if (!isq) {
    float* o = kc + (long long)slot[t] * slotStride + (long long)pos[t] * kvdim + (hh - heads) * hd;
    o[a] = y0;
    o[b] = y1;
  }
}
