// The tests of the host scripts in this directory (vfio-bind.sh,
// hugepages.sh, socket-group.sh): against fake host trees here, and on a
// real kernel in the VM test-bed. The host-check library the scripts'
// verdicts agree with is setup/hostcheck.
package setup

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/pci"
	"github.com/strata-llm/strata/setup/internal/fakehost"
	"github.com/strata-llm/strata/setup/testbed"
)

// The scripts are embedded so that the same tests run in the VM test-bed
// guest, where only the test binary and testdata/ are copied.
var (
	//go:embed vfio-bind.sh
	vfioBindScript string
	//go:embed hugepages.sh
	hugepagesScript string
	//go:embed socket-group.sh
	socketGroupScript string
)

// script runs one of the embedded scripts with sh and the given
// environment, returning its combined output and whether it exited 0.
type script struct {
	t    *testing.T
	path string
	env  []string
}

func newScript(t *testing.T, name, text string, env ...string) script {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return script{t: t, path: p, env: env}
}

func (s script) run(args ...string) (string, bool) {
	s.t.Helper()
	cmd := exec.Command("sh", append([]string{s.path}, args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		s.t.Fatalf("running %s: %v", s.path, err)
	}
	return string(out), err == nil
}

func readOr(path, def string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	return string(b)
}

func bindEnv(t *testing.T, sys, proc string) (etc string, env []string) {
	etc = t.TempDir()
	return etc, []string{"STRATA_SYSFS=" + sys, "STRATA_PROC=" + proc, "STRATA_ETC=" + etc,
		"STRATA_MODPROBE=true", "STRATA_SYSTEMCTL=true", "STRATA_LIBDIR=" + filepath.Join(etc, "lib")}
}

func TestVFIOBindFakeHost(t *testing.T) {
	t.Parallel()
	root := fakehost.Build(t, "translated")
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	etc, env := bindEnv(t, sys, proc)
	s := newScript(t, "vfio-bind.sh", vfioBindScript, env...)
	dev := func(bdf, f string) string { return filepath.Join(sys, "bus/pci/devices", bdf, f) }

	for _, tc := range []struct {
		name string
		args []string
		ok   bool
		says []string
	}{
		{"boot disk", []string{"bind", "0000:01:00.0"}, false, []string{"refusing to take 0000:01:00.0", "/dev/nvme0n1 boot disk: holds /"}},
		{"not nvme", []string{"bind", "0000:02:00.0"}, false, []string{"not an NVMe controller (class 0x030200)"}},
		{"bad address", []string{"bind", "zz:00"}, false, []string{"not a PCI address"}},
		{"no device", []string{"bind", "0000:42:00.0"}, false, []string{"no PCI device 0000:42:00.0"}},
		{"no command", nil, false, []string{"vfio-bind.sh [--dry-run]"}},
		{"dry run", []string{"--dry-run", "bind", "09:00.0"}, true, []string{
			"would write 'vfio-pci' to " + dev("0000:09:00.0", "driver_override"),
			"would write '0000:09:00.0' to " + dev("0000:09:00.0", "driver/unbind"),
			"would write '0000:09:00.0' to " + filepath.Join(sys, "bus/pci/drivers_probe"),
			"would write " + filepath.Join(etc, "udev/rules.d/70-strata-vfio.rules"),
			`KERNEL=="0000:09:00.0", ATTR{driver_override}="vfio-pci"`,
		}},
		{"status", []string{"status"}, true, []string{"0000:01:00.0 driver=nvme iommu_group=2 persistent=no", "in use: /dev/nvme0n1 boot disk: holds /", "0000:09:00.0 driver=nvme iommu_group=9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := s.run(tc.args...)
			if ok != tc.ok {
				t.Fatalf("exit ok=%v, want %v:\n%s", ok, tc.ok, out)
			}
			for _, want := range tc.says {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	// Neither the refusals nor the dry run touched anything.
	for _, p := range []string{dev("0000:01:00.0", "driver_override"), dev("0000:09:00.0", "driver_override"), filepath.Join(sys, "bus/pci/drivers_probe"), filepath.Join(etc, "strata")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written by a refused or dry run", p)
		}
	}

	// A real bind on the fake tree performs the driver_override protocol,
	// then notices that nothing rebound the device (no kernel here).
	out, ok := s.run("bind", "0000:09:00.0")
	if ok || !strings.Contains(out, "bound to 'nvme' after probing, not vfio-pci") {
		t.Fatalf("bind on a fake tree: ok=%v\n%s", ok, out)
	}
	if got := readOr(dev("0000:09:00.0", "driver_override"), ""); got != "vfio-pci" {
		t.Errorf("driver_override = %q", got)
	}
	if got := readOr(filepath.Join(sys, "bus/pci/drivers/nvme/unbind"), ""); got != "0000:09:00.0" {
		t.Errorf("nvme/unbind got %q", got)
	}
	if got := readOr(filepath.Join(sys, "bus/pci/drivers_probe"), ""); got != "0000:09:00.0" {
		t.Errorf("drivers_probe got %q", got)
	}
}

// TestVFIOBindPersistence binds a controller that is already on vfio-pci:
// only the persistence is written, once, and unbinding removes it again.
func TestVFIOBindPersistence(t *testing.T) {
	t.Parallel()
	root := fakehost.Build(t, "passthrough")
	etc, env := bindEnv(t, filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	s := newScript(t, "vfio-bind.sh", vfioBindScript, env...)
	out, ok := s.run("bind", "0000:c3:00.0")
	if !ok || !strings.Contains(out, "already bound to vfio-pci") || !strings.Contains(out, "wrote "+filepath.Join(etc, "strata/vfio-devices")) {
		t.Fatalf("first bind: ok=%v\n%s", ok, out)
	}
	rules := readOr(filepath.Join(etc, "udev/rules.d/70-strata-vfio.rules"), "")
	if !strings.Contains(rules, `ACTION=="add", SUBSYSTEM=="pci", KERNEL=="0000:c3:00.0", ATTR{driver_override}="vfio-pci"`) {
		t.Errorf("udev rule:\n%s", rules)
	}
	unit := readOr(filepath.Join(etc, "systemd/system/strata-vfio.service"), "")
	if !strings.Contains(unit, "vfio-bind.sh --no-persist apply") || !strings.Contains(unit, "Before=stratad.service") {
		t.Errorf("unit:\n%s", unit)
	}
	if got := readOr(filepath.Join(etc, "modules-load.d/strata-vfio.conf"), ""); got != "vfio-pci\n" {
		t.Errorf("modules-load.d = %q", got)
	}
	if _, err := os.Stat(filepath.Join(etc, "lib/vfio-bind.sh")); err != nil {
		t.Errorf("script not installed for the unit: %v", err)
	}
	out, ok = s.run("bind", "0000:c3:00.0")
	if !ok || strings.Contains(out, "wrote") {
		t.Fatalf("second bind is not a no-op: ok=%v\n%s", ok, out)
	}
	out, ok = s.run("apply")
	if !ok || !strings.Contains(out, "0000:c3:00.0: already bound") {
		t.Fatalf("apply: ok=%v\n%s", ok, out)
	}
	if out, _ := s.run("status"); !strings.Contains(out, "0000:c3:00.0 driver=vfio-pci iommu_group=14 persistent=yes") {
		t.Errorf("status:\n%s", out)
	}
	// Unbinding on a fake tree cannot rebind, but the list entry goes
	// only after a successful rebind, so check the dry run's plan.
	out, ok = s.run("--dry-run", "unbind", "0000:c3:00.0")
	if !ok || !strings.Contains(out, "would clear") || !strings.Contains(out, "would write '0000:c3:00.0' to "+filepath.Join(root, "sys/bus/pci/drivers_probe")) {
		t.Fatalf("dry-run unbind: ok=%v\n%s", ok, out)
	}
	if got := readOr(filepath.Join(etc, "strata/vfio-devices"), ""); got != "0000:c3:00.0\n" {
		t.Errorf("dry run changed the list: %q", got)
	}
}

func TestHugepagesScript(t *testing.T) {
	t.Parallel()
	sys, etc := t.TempDir(), t.TempDir()
	node := filepath.Join(sys, "kernel/mm/hugepages/hugepages-2048kB")
	os.MkdirAll(node, 0o755)
	os.WriteFile(filepath.Join(node, "nr_hugepages"), []byte("0\n"), 0o644)
	os.WriteFile(filepath.Join(node, "free_hugepages"), []byte("0\n"), 0o644)
	s := newScript(t, "hugepages.sh", hugepagesScript, "STRATA_SYSFS="+sys, "STRATA_ETC="+etc)
	conf := filepath.Join(etc, "sysctl.d/80-strata-hugepages.conf")

	if out, ok := s.run("--dry-run", "--pages", "16"); !ok || !strings.Contains(out, "would write 16 to") {
		t.Fatalf("dry run: %v\n%s", ok, out)
	}
	if readOr(filepath.Join(node, "nr_hugepages"), "") != "0\n" || readOr(conf, "") != "" {
		t.Fatal("dry run wrote something")
	}
	if out, ok := s.run("--pages", "16"); !ok || !strings.Contains(out, "reserved 16 pages") || !strings.Contains(out, "wrote "+conf) {
		t.Fatalf("reserve: %v\n%s", ok, out)
	}
	if !strings.Contains(readOr(conf, ""), "vm.nr_hugepages = 16") {
		t.Errorf("sysctl file: %q", readOr(conf, ""))
	}
	if out, ok := s.run("--pages", "16"); !ok || !strings.Contains(out, "already reserved") || !strings.Contains(out, "already set") {
		t.Fatalf("second run not idempotent: %v\n%s", ok, out)
	}
	for _, bad := range [][]string{{"--pages", "x"}, {"--size", "3M", "--pages", "2"}, {}} {
		if out, ok := s.run(bad...); ok {
			t.Errorf("%q accepted:\n%s", bad, out)
		}
	}
	if out, ok := s.run("--size", "1G", "--pages", "4"); ok || !strings.Contains(out, "no 1G hugepages") {
		t.Errorf("1G without the sysfs node: %v\n%s", ok, out)
	}
}

func TestSocketGroupScript(t *testing.T) {
	t.Parallel()
	etc, run := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nstrata:x:997:alice\n"), 0o644)
	s := newScript(t, "socket-group.sh", socketGroupScript, "STRATA_ETC="+etc, "STRATA_RUN="+run)
	out, ok := s.run("--dry-run", "--user", "alice", "--admin", "bob")
	if !ok {
		t.Fatalf("dry run failed:\n%s", out)
	}
	for _, want := range []string{"group strata exists", "would run: groupadd --system strata-admin", "alice is in strata",
		"would run: usermod -aG strata bob", "would run: usermod -aG strata-admin bob", "would write " + filepath.Join(etc, "tmpfiles.d/strata.conf")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(etc, "tmpfiles.d")); err == nil {
		t.Error("dry run wrote tmpfiles.d")
	}
}

// TestVFIOBindGuest hands the test-bed's second controller to the kernel's
// nvme driver and back with vfio-bind.sh, on a real kernel.
func TestVFIOBindGuest(t *testing.T) {
	t.Parallel()
	g := testbed.Require(t)
	etc := t.TempDir()
	s := newScript(t, "vfio-bind.sh", vfioBindScript, "STRATA_ETC="+etc, "STRATA_MODPROBE=true",
		"STRATA_SYSTEMCTL=true", "STRATA_LIBDIR="+filepath.Join(etc, "lib"))
	sys := pci.Sysfs{}
	drv := func() string { d, _ := sys.Driver(g.NVMe1); return d }
	if d := drv(); d != "vfio-pci" {
		t.Fatalf("%s starts on %q", g.NVMe1, d)
	}
	t.Cleanup(func() {
		if drv() != "vfio-pci" {
			sys.BindVFIO(g.NVMe1)
		}
	})
	out, ok := s.run("unbind", g.NVMe1)
	t.Logf("unbind:\n%s", out)
	if !ok || drv() != "nvme" {
		t.Fatalf("unbind: ok=%v, driver now %q", ok, drv())
	}
	if out, ok := s.run("unbind", g.NVMe1); !ok || !strings.Contains(out, "not on vfio-pci (driver nvme)") {
		t.Errorf("second unbind is not a no-op: %v\n%s", ok, out)
	}
	out, ok = s.run("bind", g.NVMe1)
	t.Logf("bind:\n%s", out)
	if !ok || drv() != "vfio-pci" {
		t.Fatalf("bind: ok=%v, driver now %q", ok, drv())
	}
	if !strings.Contains(readOr(filepath.Join(etc, "udev/rules.d/70-strata-vfio.rules"), ""), `KERNEL=="`+g.NVMe1+`"`) {
		t.Error("no udev rule written")
	}
	if out, ok := s.run("bind", g.NVMe1); !ok || !strings.Contains(out, "already bound") || strings.Contains(out, "wrote") {
		t.Errorf("second bind is not a no-op: %v\n%s", ok, out)
	}
}
