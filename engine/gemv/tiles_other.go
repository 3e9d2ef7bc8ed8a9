//go:build !amd64

package gemv

import "github.com/strata-llm/strata/engine/quant"

func amxReady() bool { return false }

var widens = map[quant.Type]widen{}

func tilesAMX(cfg *byte, w *uint16, wstride int, x *uint16, xstep int, c *float32, chunks, tiles int) {
	panic("gemv: no tile unit on this architecture")
}

func tilesAMX2(cfg *byte, w *uint16, wstride, wnext int, x *uint16, xstep int, c *float32, chunks, tiles int) {
	panic("gemv: no tile unit on this architecture")
}
