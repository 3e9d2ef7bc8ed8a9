package vfio

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCdevPath finds the cdev node from vfio-dev/, and reports a kernel
// without VFIO cdevs (no vfio-dev directory) as ErrNotSupported.
func TestCdevPath(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	with := filepath.Join(root, "bus/pci/devices/0000:00:04.0/vfio-dev/vfio3")
	without := filepath.Join(root, "bus/pci/devices/0000:00:05.0")
	for _, d := range []string{with, without} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := Sysfs{Root: root}
	if p, err := CdevPath(s, "00:04.0"); err != nil || p != "/dev/vfio/devices/vfio3" {
		t.Errorf("CdevPath = %q, %v", p, err)
	}
	if _, err := CdevPath(s, "0000:00:05.0"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("CdevPath without vfio-dev: %v, want ErrNotSupported", err)
	}
	if _, err := CdevPath(s, "0000:00:09.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("CdevPath of a missing device: %v, want ErrNoDevice", err)
	}
}
