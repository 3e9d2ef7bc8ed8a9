//go:build !amd64

package gemv

import "github.com/strata-llm/strata/engine/quant"

func available(Impl) bool { return false }

func lookup(Impl, quant.Type) kernel  { return nil }
func lookup4(Impl, quant.Type) kernel { return nil }

func attnF(Impl, int) Impl { return Go }
func vecF(Impl) Impl       { return Go }

func scores4AVX512(q *float32, n int, k *float32, dstride, vstride, keys int, s *float32, sstride int) {
	panic("gemv: no AVX-512 on this architecture")
}

func mix4AVX512(p *float32, pstride int, v *float32, vstride, keys, n int, out *float32, acc bool) {
	panic("gemv: no AVX-512 on this architecture")
}

func softmaxAVX512(s *float32, n int, scale float32) (float32, float64) {
	panic("gemv: no AVX-512 on this architecture")
}

func swigluAVX512(x, u *float32, n int) {
	panic("gemv: no AVX-512 on this architecture")
}

func gegluAVX512(x, u *float32, n int) {
	panic("gemv: no AVX-512 on this architecture")
}

func tilesSetAVX512(f *float32, chunks int, dst *uint16, step int) int {
	panic("gemv: no AVX-512 on this architecture")
}

func scores4AVX2(q *float32, n int, k *float32, dstride, vstride, keys int, s *float32, sstride int) {
	panic("gemv: no AVX2 on this architecture")
}

func mix4AVX2(p *float32, pstride int, v *float32, vstride, keys, n int, out *float32, acc bool) {
	panic("gemv: no AVX2 on this architecture")
}

func softmaxAVX2(s *float32, n int, scale float32) (float32, float64) {
	panic("gemv: no AVX2 on this architecture")
}

func swigluAVX2(x, u *float32, n int) {
	panic("gemv: no AVX2 on this architecture")
}

func gegluAVX2(x, u *float32, n int) {
	panic("gemv: no AVX2 on this architecture")
}
