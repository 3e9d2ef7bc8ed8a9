package nvmehost_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/nvmehost"
)

func TestKernelIdentityAndGeometry(t *testing.T) {
	t.Parallel()
	h := fakeHost(t)
	ctrl := filepath.Join(h.Sysfs.Root, "bus/pci/devices/0000:00:04.0/nvme/nvme0")
	for name, body := range map[string]string{
		"model": "QEMU NVMe Ctrl                          \n", "serial": "strata0             \n", "firmware_rev": "9.2.1   \n",
		"nvme0n1/size": "131072\n", "nvme0n1/queue/logical_block_size": "4096\n",
	} {
		p := filepath.Join(ctrl, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		bdf  string
		want nvmehost.KernelIdentity
		ok   bool
	}{
		{"0000:00:04.0", nvmehost.KernelIdentity{Name: "nvme0", Model: "QEMU NVMe Ctrl", Serial: "strata0", Firmware: "9.2.1"}, true},
		{"0000:00:06.0", nvmehost.KernelIdentity{}, false}, // on vfio-pci: the kernel has no controller
		{"0000:00:09.0", nvmehost.KernelIdentity{}, false},
	}
	for _, tc := range tests {
		got, ok := h.KernelIdentity(tc.bdf)
		if got != tc.want || ok != tc.ok {
			t.Errorf("KernelIdentity(%s) = %+v, %v; want %+v, %v", tc.bdf, got, ok, tc.want, tc.ok)
		}
	}
	if n, bs := h.DiskGeometry("nvme0n1"); n != 131072*512 || bs != 4096 {
		t.Errorf("DiskGeometry(nvme0n1) = %d, %d", n, bs)
	}
	if n, bs := h.DiskGeometry("nvme9n1"); n != 0 || bs != 0 {
		t.Errorf("DiskGeometry(nvme9n1) = %d, %d", n, bs)
	}
}
