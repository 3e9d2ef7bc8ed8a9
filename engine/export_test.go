package engine

import "github.com/strata-llm/strata/kernels/cudadrv"

// SetOpenDevice stands in f for opening the GPU until the returned
// function restores the real one.
func SetOpenDevice(f func() (*cudadrv.Device, error)) (restore func()) {
	old := openDevice
	openDevice = f
	return func() { openDevice = old }
}
