package pci

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBDF checks a PCI address and returns it in the canonical sysfs form
// "dddd:bb:dd.f" (lower-case hex). The domain may be omitted ("bb:dd.f").
// VFIO and sysfs both need the canonical form, so every BDF a caller passes
// in goes through here first.
func ParseBDF(s string) (string, error) {
	orig := s
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0000"}, parts...)
	case 3:
	default:
		return "", fmt.Errorf("PCI address %q: want [domain:]bus:device.function", orig)
	}
	df := strings.Split(parts[2], ".")
	if len(df) != 2 {
		return "", fmt.Errorf("PCI address %q: want [domain:]bus:device.function", orig)
	}
	fields := []struct {
		s      string
		digits int
		max    uint64
		name   string
	}{{parts[0], 4, 0xffff, "domain"}, {parts[1], 2, 0xff, "bus"}, {df[0], 2, 0x1f, "device"}, {df[1], 1, 7, "function"}}
	vals := make([]uint64, 4)
	for i, f := range fields {
		if f.s == "" || len(f.s) > f.digits {
			return "", fmt.Errorf("PCI address %q: bad %s %q", orig, f.name, f.s)
		}
		v, err := strconv.ParseUint(f.s, 16, 32)
		if err != nil || v > f.max {
			return "", fmt.Errorf("PCI address %q: bad %s %q", orig, f.name, f.s)
		}
		vals[i] = v
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", vals[0], vals[1], vals[2], vals[3]), nil
}
