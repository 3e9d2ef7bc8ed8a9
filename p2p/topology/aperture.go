package topology

// Mem64 says the BAR is a 64-bit memory BAR (IORESOURCE_MEM_64). A 64-bit
// BAR takes two of the six BAR registers, so the device's next BAR sits two
// resource indices further on, not one.
func (b BARInfo) Mem64() bool { return b.Flags&0x00100000 != 0 }

// GPUAperture returns the resource index of an NVIDIA GPU's "BAR1", the
// window onto device memory that peer-to-peer DMA targets, from the BARs of
// its sysfs resource file. NVIDIA names its BARs by order — BAR0 registers,
// BAR1 memory aperture, BAR3 doorbells — but the kernel indexes resources by
// BAR register: where BAR0 is 64-bit (an H200's is) the aperture is
// resource 2, not 1, and reading index 1 finds an empty slot. ok is false
// when BAR0 is unassigned or no aperture follows it.
func GPUAperture(bars []BARInfo) (index int, ok bool) {
	if len(bars) == 0 || bars[0].Size() == 0 || !bars[0].Memory() {
		return 0, false
	}
	i := 1
	if bars[0].Mem64() {
		i = 2
	}
	if i > 5 || i >= len(bars) || bars[i].Size() == 0 || !bars[i].Memory() {
		return i, false
	}
	return i, true
}
