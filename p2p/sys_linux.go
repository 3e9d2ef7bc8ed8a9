package p2p

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// allocLocked maps anonymous shared memory, populated and locked, rounded
// up to whole pages of the kind asked for.
func allocLocked(size int, huge bool) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("size %d", size)
	}
	page := 4096
	flags := unix.MAP_SHARED | unix.MAP_ANONYMOUS | unix.MAP_POPULATE
	if huge {
		page = 2 << 20
		flags |= unix.MAP_HUGETLB | 21<<unix.MAP_HUGE_SHIFT
	}
	n := (size + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		if huge {
			return nil, fmt.Errorf("mmap %d bytes of hugepages (are vm.nr_hugepages reserved?): %w", n, err)
		}
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	if err := unix.Mlock(mem); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("mlock %d bytes (RLIMIT_MEMLOCK or CAP_IPC_LOCK): %w", n, err)
	}
	return mem, nil
}

func freeLocked(mem []byte) error {
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("p2p: munmap: %w", err)
	}
	return nil
}

// MapSysfsBAR mmaps BAR index of PCI function bdf through sysfs
// (/sys/bus/pci/devices/BDF/resourceN), the route for a peer that is not
// opened through VFIO. It returns the mapping and its release.
func MapSysfsBAR(sysfs, bdf string, index int) ([]byte, func() error, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	path := fmt.Sprintf("%s/bus/pci/devices/%s/resource%d", sysfs, bdf, index)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("p2p: opening %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("p2p: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("p2p: mmap %s: %w", path, err)
	}
	return mem, func() error { return unix.Munmap(mem) }, nil
}
