//go:build !amd64

package gemv

import "github.com/strata-llm/strata/engine/quant"

func available(Impl) bool { return false }

func lookup(Impl, quant.Type) kernel  { return nil }
func lookup4(Impl, quant.Type) kernel { return nil }
