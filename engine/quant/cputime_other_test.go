//go:build !linux

package quant

import "time"

func threadCPU() (time.Duration, bool)  { return 0, false }
func processCPU() (time.Duration, bool) { return 0, false }
