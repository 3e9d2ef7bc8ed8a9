package engine

import kcuda "github.com/strata-llm/strata/kernels/cuda"

// SetOpenDevice stands in f for opening the GPU until the returned
// function restores the real one.
func SetOpenDevice(f func() (*kcuda.Device, error)) (restore func()) {
	old := openDevice
	openDevice = f
	return func() { openDevice = old }
}
