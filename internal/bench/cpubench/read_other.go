//go:build !amd64

package cpubench

var readLoop, readKernel = readGoPtr, "go"
