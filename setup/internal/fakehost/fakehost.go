package fakehost

import (
	"bufio"
	"embed"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

//go:embed hosts/*.txt
var hosts embed.FS

// Build materializes a fake host tree from hosts/NAME.txt into a
// temporary directory and returns its root. The format, one directive a
// line ('#' starts a comment):
//
//	include FILE                 another fixture, relative to hosts/
//	file PATH TEXT...            a file; "\n" in TEXT is a newline
//	link PATH TARGET             a symlink
//	dir PATH                     a directory
//	group N TYPE                 sys/kernel/iommu_groups/N with its type file
//	pci BDF key=value...         a PCI function under sys/devices, linked from
//	                             sys/bus/pci/devices; keys: parent (a BDF
//	                             declared earlier), vendor, device, class,
//	                             driver, group, acs (ACS control, hex; a
//	                             4 KiB config space with the capability),
//	                             cfg=short (a 64-byte config space, as a
//	                             non-root reader sees it), bar1 (size, e.g.
//	                             32G or 256M, with a resource1 file), bar0=64
//	                             (a 64-bit BAR0, as on an H100/H200: BAR1
//	                             then sits at resource index 2)
//	disk NAME BDF DEV            sys/block/NAME under the controller's nvme/
func Build(t testing.TB, name string) string {
	t.Helper()
	root := t.TempDir()
	devPaths := map[string]string{} // BDF → path under root
	var load func(name string)
	load = func(name string) {
		f, err := hosts.Open("hosts/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			f := strings.Fields(line)
			fail := func(format string, a ...any) {
				t.Fatalf("%s:%d: %s", name, n, fmt.Sprintf(format, a...))
			}
			mustWrite := func(p string, data []byte) {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					fail("%v", err)
				}
				if err := os.WriteFile(filepath.Join(root, p), data, 0o644); err != nil {
					fail("%v", err)
				}
			}
			mustLink := func(p, target string) {
				full := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					fail("%v", err)
				}
				if err := os.Symlink(target, full); err != nil {
					fail("%v", err)
				}
			}
			switch f[0] {
			case "include":
				load(f[1])
			case "file":
				text := ""
				if len(f) > 2 {
					text = strings.ReplaceAll(strings.SplitN(line, " ", 3)[2], `\n`, "\n")
				}
				mustWrite(f[1], []byte(text))
			case "link":
				mustLink(f[1], f[2])
			case "dir":
				if err := os.MkdirAll(filepath.Join(root, f[1]), 0o755); err != nil {
					fail("%v", err)
				}
			case "group":
				mustWrite(filepath.Join("sys/kernel/iommu_groups", f[1], "type"), []byte(f[2]+"\n"))
			case "pci":
				bdf := f[1]
				kv := map[string]string{}
				for _, p := range f[2:] {
					k, v, _ := strings.Cut(p, "=")
					kv[k] = v
				}
				dir := filepath.Join("sys/devices/pci0000:00", bdf)
				if p := kv["parent"]; p != "" {
					pp, ok := devPaths[p]
					if !ok {
						fail("parent %s not declared", p)
					}
					dir = filepath.Join(pp, bdf)
				}
				devPaths[bdf] = dir
				mustWrite(filepath.Join(dir, "vendor"), []byte("0x"+kv["vendor"]+"\n"))
				mustWrite(filepath.Join(dir, "device"), []byte("0x"+kv["device"]+"\n"))
				mustWrite(filepath.Join(dir, "class"), []byte("0x"+kv["class"]+"\n"))
				cfg := make([]byte, 4096)
				if kv["cfg"] == "short" {
					cfg = cfg[:64]
				}
				if a, ok := kv["acs"]; ok {
					ctl, err := strconv.ParseUint(a, 16, 16)
					if err != nil {
						fail("acs %q: %v", a, err)
					}
					binary.LittleEndian.PutUint32(cfg[0x100:], 0x0001000d) // ACS, version 1, last
					binary.LittleEndian.PutUint16(cfg[0x104:], 0x7f)       // capabilities
					binary.LittleEndian.PutUint16(cfg[0x106:], uint16(ctl))
				}
				mustWrite(filepath.Join(dir, "config"), cfg)
				res := strings.Repeat("0x0000000000000000 0x0000000000000000 0x0000000000000000\n", 13)
				if b := kv["bar1"]; b != "" {
					size, err := parseSize(b)
					if err != nil {
						fail("bar1: %v", err)
					}
					start := uint64(0x38000000000)
					lines := strings.Split(res, "\n")
					idx := 1
					lines[0] = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200"
					if kv["bar0"] == "64" {
						idx = 2
						lines[0] = "0x0000104002000000 0x0000104002ffffff 0x000000000014220c"
					}
					lines[idx] = fmt.Sprintf("0x%016x 0x%016x 0x000000000014220c", start, start+size-1)
					res = strings.Join(lines, "\n")
					mustWrite(filepath.Join(dir, fmt.Sprintf("resource%d", idx)), nil)
				}
				mustWrite(filepath.Join(dir, "resource"), []byte(res))
				up := strings.Repeat("../", 3)
				mustLink(filepath.Join("sys/bus/pci/devices", bdf), up+strings.TrimPrefix(dir, "sys/"))
				if d := kv["driver"]; d != "" {
					if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers", d), 0o755); err != nil {
						fail("%v", err)
					}
					rel, _ := filepath.Rel(filepath.Join(root, dir), filepath.Join(root, "sys/bus/pci/drivers", d))
					mustLink(filepath.Join(dir, "driver"), rel)
				}
				if g := kv["group"]; g != "" {
					gdir := filepath.Join("sys/kernel/iommu_groups", g)
					if _, err := os.Stat(filepath.Join(root, gdir, "type")); err != nil {
						fail("group %s not declared", g)
					}
					rel, _ := filepath.Rel(filepath.Join(root, dir), filepath.Join(root, gdir))
					mustLink(filepath.Join(dir, "iommu_group"), rel)
					rel, _ = filepath.Rel(filepath.Join(root, gdir, "devices"), filepath.Join(root, dir))
					mustLink(filepath.Join(gdir, "devices", bdf), rel)
				}
			case "disk":
				name, bdf, dev := f[1], f[2], f[3]
				pp, ok := devPaths[bdf]
				if !ok {
					fail("controller %s not declared", bdf)
				}
				ddir := filepath.Join(pp, "nvme", "nvme0", name)
				mustWrite(filepath.Join(ddir, "dev"), []byte(dev+"\n"))
				mustWrite(filepath.Join(ddir, "nsid"), []byte("1\n"))
				rel, _ := filepath.Rel(filepath.Join(root, "sys/block"), filepath.Join(root, ddir))
				mustLink(filepath.Join("sys/block", name), rel)
			default:
				fail("unknown directive %q", f[0])
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	load(name + ".txt")
	return root
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n * mult, err
}
