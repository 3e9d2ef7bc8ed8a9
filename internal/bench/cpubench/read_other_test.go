//go:build !amd64

package cpubench

func asmLoops() map[string]func([]byte) uint64 { return nil }
