package vfio

import "github.com/strata-llm/strata/pci"

// Sysfs binds PCI devices to drivers and finds their IOMMU groups through
// /sys. It is pci.Sysfs, which holds the plain sysfs reads and writes so
// that code that only inspects a host (setup check) need not link this
// package; the name stays here because binding to vfio-pci is the first
// step of every VFIO open (Domain.OpenPCI looks groups up through it).
type Sysfs = pci.Sysfs

// PCIDevice is what sysfs says about one PCI function (pci.Function).
type PCIDevice = pci.Function

// ClassNVMe is the PCI class code of NVMe controllers (mass storage,
// non-volatile memory, NVMe programming interface).
const ClassNVMe = pci.ClassNVMe

// ParseBDF checks a PCI address and returns it in the canonical sysfs form
// "dddd:bb:dd.f"; see pci.ParseBDF.
func ParseBDF(s string) (string, error) { return pci.ParseBDF(s) }
