//go:build !linux

package bench

import "time"

// processCPU is not measured off Linux: CPU per GB stays 0 (unknown).
func processCPU() time.Duration { return 0 }
