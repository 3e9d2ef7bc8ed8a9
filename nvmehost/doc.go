// Package nvmehost is what the daemon needs to own NVMe controllers and
// what a host check needs to see them: list them together with whatever of
// the host uses them, hand one to vfio-pci only when nothing does (no
// mounted filesystem, swap area or stacked device such as LVM or md on any
// of its namespaces), and give it back to the kernel's nvme driver.
//
// Everything is read from sysfs and procfs under configurable roots, so it
// is tested against fake trees; binding goes through package pci's Sysfs.
// It is plain file I/O, with no ioctl and no NVMe command, so that the
// unprivileged strata client (`strata setup check`) links it without the
// NVMe driver or VFIO.
package nvmehost
