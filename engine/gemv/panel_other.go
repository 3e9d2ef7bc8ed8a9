//go:build !amd64

package gemv

import "github.com/strata-llm/strata/engine/quant"

func panelReady() bool { return false }

func lookupPanel(Impl, quant.Type) panelKernel { return nil }
