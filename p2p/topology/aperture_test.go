package topology_test

import (
	"testing"

	"github.com/strata-llm/strata/p2p/topology"
)

func TestGPUAperture(t *testing.T) {
	t.Parallel()
	const empty = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
	tests := []struct {
		name     string
		resource string
		index    int
		ok       bool
		size     uint64
	}{
		{
			// An H200's resource file as sysfs lists it: a 64-bit BAR0
			// takes two slots, so the 256 GiB aperture is resource 2.
			name: "64-bit BAR0 (H200)",
			resource: "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n" + empty +
				"0x0000100000000000 0x0000103fffffffff 0x000000000014220c\n" + empty +
				"0x0000104000000000 0x0000104001ffffff 0x000000000014220c\n" + empty + empty,
			index: 2, ok: true, size: 256 << 30,
		},
		{
			name: "32-bit BAR0, classic 256 MiB BAR1",
			resource: "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n" +
				"0x00000000e0000000 0x00000000efffffff 0x000000000014220c\n" + empty +
				"0x00000000f0000000 0x00000000f1ffffff 0x000000000014220c\n" + empty + empty + empty,
			index: 1, ok: true, size: 256 << 20,
		},
		{
			name:     "aperture unassigned",
			resource: "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n" + empty + empty + empty + empty + empty + empty,
			index:    2, ok: false,
		},
		{
			name:     "BAR0 unassigned",
			resource: empty + "0x00000000e0000000 0x00000000efffffff 0x000000000014220c\n",
			index:    0, ok: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bars, err := topology.ParseResource(tt.resource)
			if err != nil {
				t.Fatal(err)
			}
			i, ok := topology.GPUAperture(bars)
			if i != tt.index || ok != tt.ok {
				t.Fatalf("GPUAperture = %d, %v; want %d, %v", i, ok, tt.index, tt.ok)
			}
			if ok && bars[i].Size() != tt.size {
				t.Fatalf("aperture size %d, want %d", bars[i].Size(), tt.size)
			}
		})
	}
}
