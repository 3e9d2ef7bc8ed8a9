package hostcheck

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/strata-llm/strata/setup/internal/fakehost"
)

// TestCheckFakeHosts runs every check against the fake host trees of
// setup/internal/fakehost and holds the verdicts and the chosen route to
// what each tree was built to show.
func TestCheckFakeHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host   string
		want   map[string]Status // result ID → status
		says   map[string]string // result ID → substring of its summary
		route  string
		nvme   string
		gpu    string
		lostIn string // substring of some NotChosen entry
	}{
		{
			host: "translated",
			want: map[string]Status{
				"iommu": Pass, "vfio-modules": Pass, "vfio-dev": Pass, "vfio-cdev": Pass,
				"iommu-group 0000:01:00.0": Pass, "iommu-group 0000:09:00.0": Pass, "iommu-group 0000:02:00.0": Pass,
				"acs 0000:09:00.0→0000:02:00.0": Warn, "memlock": Pass, "hugepages": Pass, "nvidia-driver": Pass,
				"bar1 0000:02:00.0": Pass, "gdrdrv": Pass, "kernel-iommufd": Pass, "kernel-vfio-dmabuf": Warn,
				"kernel-ioas-map-file": Warn, "dma-buf": Warn,
			},
			says: map[string]string{
				"iommu":                         "translated",
				"acs 0000:09:00.0→0000:02:00.0": "root complex",
				"bar1 0000:02:00.0":             "128 GiB",
				"nvidia-driver":                 "open kernel module",
				"kernel-vfio-dmabuf":            "6.19",
			},
			route: "peer-bar", nvme: "0000:09:00.0", gpu: "0000:02:00.0",
			lostIn: "nvme 0000:01:00.0: in use by the host (mounted: /dev/nvme0n1 on /)",
		},
		{
			host: "passthrough",
			want: map[string]Status{
				"iommu": Pass, "iommu-group 0000:c3:00.0": Pass, "acs 0000:c3:00.0→0000:c4:00.0": Pass,
				"gdrdrv": Warn, "bar1 0000:c4:00.0": Pass,
			},
			says: map[string]string{
				"iommu":                         "passthrough",
				"acs 0000:c3:00.0→0000:c4:00.0": "direct path under 0000:c1:00.0",
			},
			route: "host-pinned", nvme: "0000:c3:00.0", lostIn: "no gdrdrv",
		},
		{
			host: "off",
			want: map[string]Status{
				"iommu": Fail, "iommu-group 0000:01:00.0": Fail, "vfio-dev": Fail, "vfio-modules": Warn,
				"acs": Warn, "nvidia-driver": Warn,
			},
			says:  map[string]string{"iommu": "IOMMU off"},
			route: "file", lostIn: "host-pinned: needs VFIO",
		},
		{
			// Nothing for VFIO to drive: its absence warns, and the host
			// that runs models on the CPU fails no check.
			host: "cpu-only",
			want: map[string]Status{
				"iommu": Warn, "vfio-dev": Warn, "acs": Warn, "nvidia-driver": Warn,
			},
			says:  map[string]string{"iommu": "no NVMe controller here"},
			route: "file",
		},
		{
			host: "off-vfio-loaded",
			want: map[string]Status{
				"iommu": Fail, "vfio-dev": Fail, "vfio-modules": Pass,
			},
			says:  map[string]string{"vfio-dev": "IOMMU is off"},
			route: "file", lostIn: "host-pinned: needs VFIO",
		},
		{
			host: "novfio",
			want: map[string]Status{
				"iommu": Pass, "vfio-modules": Fail, "vfio-dev": Fail, "vfio-cdev": Warn,
				"kernel-iommufd": Warn, "iommu-group 0000:01:00.0": Pass,
			},
			says:  map[string]string{"vfio-modules": "no vfio-pci", "kernel-iommufd": "CONFIG_IOMMUFD"},
			route: "file",
		},
		{
			host: "shared",
			want: map[string]Status{
				"iommu": Pass, "iommu-group 0000:07:00.0": Fail, "iommu-group 0000:08:00.0": Pass,
				"acs 0000:07:00.0→0000:08:00.0": Pass,
			},
			says:   map[string]string{"iommu-group 0000:07:00.0": "shares IOMMU group 5 with GPU 0000:08:00.0"},
			route:  "file",
			lostIn: "shares IOMMU group 5",
		},
		{
			host: "acs-block",
			want: map[string]Status{
				"acs 0000:07:00.0→0000:08:00.0": Fail, "iommu-group 0000:07:00.0": Pass, "bar1 0000:08:00.0": Warn,
			},
			says: map[string]string{
				"acs 0000:07:00.0→0000:08:00.0": "egress control on 0000:06:00.0, 0000:06:01.0",
				"bar1 0000:08:00.0":             "256 MiB",
			},
			route: "host-pinned", nvme: "0000:07:00.0", lostIn: "blocks peer requests",
		},
		{
			host: "acs-redirect",
			want: map[string]Status{"acs 0000:07:00.0→0000:08:00.0": Warn},
			says: map[string]string{"acs 0000:07:00.0→0000:08:00.0": "redirects peer requests on 0000:06:00.0, 0000:06:01.0"},
			// Redirect sends peer traffic through the root complex; the
			// self-test decides, so peer-bar is still planned.
			route: "peer-bar", nvme: "0000:07:00.0", gpu: "0000:08:00.0",
		},
	} {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			root := fakehost.Build(t, tc.host)
			rep := Check(Options{Root: root})
			if tc.host == "cpu-only" {
				for _, r := range rep.Results {
					if r.Status == Fail {
						t.Errorf("a CPU-only host fails %s: %s", r.ID, r.Summary)
					}
				}
			}
			byID := map[string]Result{}
			for _, r := range rep.Results {
				if _, dup := byID[r.ID]; dup {
					t.Errorf("duplicate result ID %q", r.ID)
				}
				byID[r.ID] = r
				if r.Status != Pass && r.Fix == "" && r.Status == Fail {
					t.Errorf("%s fails without a fix", r.ID)
				}
			}
			for id, want := range tc.want {
				got, ok := byID[id]
				if !ok {
					t.Errorf("no result %q", id)
					continue
				}
				if got.Status != want {
					t.Errorf("%s = %s (%s), want %s", id, got.Status, got.Summary, want)
				}
			}
			for id, sub := range tc.says {
				if got := byID[id]; !strings.Contains(got.Summary, sub) {
					t.Errorf("%s says %q, want it to mention %q", id, got.Summary, sub)
				}
			}
			if rep.Route.Kind != tc.route || rep.Route.NVMe != tc.nvme || rep.Route.GPU != tc.gpu {
				t.Errorf("route = %s nvme=%q gpu=%q (%s), want %s nvme=%q gpu=%q", rep.Route.Kind, rep.Route.NVMe, rep.Route.GPU, rep.Route.Why, tc.route, tc.nvme, tc.gpu)
			}
			if tc.lostIn != "" && !strings.Contains(strings.Join(rep.Route.NotChosen, "\n"), tc.lostIn) {
				t.Errorf("route's not-chosen list %q lacks %q", rep.Route.NotChosen, tc.lostIn)
			}
			if rep.Kernel != "6.12.48+deb13-amd64" {
				t.Errorf("kernel = %q", rep.Kernel)
			}
			var text bytes.Buffer
			if err := rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), "route: "+tc.route) {
				t.Errorf("text report lacks the route:\n%s", text.String())
			}
			if testing.Verbose() {
				t.Logf("\n%s", text.String())
			}
			js, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js, &back); err != nil || len(back.Results) != len(rep.Results) {
				t.Fatalf("JSON round trip: %v", err)
			}
		})
	}
}

// TestVerdictByPurpose: a host is judged against what it is for: the
// CPU-only host serves the CPU backend but not a GPU or the NVMe driver;
// the GPU host serves a GPU; a host whose IOMMU is off fails the NVMe
// purpose only.
func TestVerdictByPurpose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		met  map[Purpose]bool
	}{
		{"cpu-only", map[Purpose]bool{PurposeCPU: true, PurposeGPU: false, PurposeNVMe: false}},
		{"gpu-stack", map[Purpose]bool{PurposeCPU: true, PurposeGPU: true}},
		{"off-vfio-loaded", map[Purpose]bool{PurposeCPU: true, PurposeNVMe: false}},
	} {
		rep := Check(Options{Root: fakehost.Build(t, tc.host)})
		for p, want := range tc.met {
			v, failing := rep.Verdict(p)
			if got := v != Fail; got != want || got != (len(failing) == 0) {
				t.Errorf("%s for %s: verdict %s (failing %v), want met %v", tc.host, p, v, failing, want)
			}
		}
	}
	for _, s := range []string{"", "CPU", "gpu", " nvme "} {
		if _, err := ParsePurpose(s); err != nil {
			t.Errorf("ParsePurpose(%q): %v", s, err)
		}
	}
	if _, err := ParsePurpose("tpu"); err == nil {
		t.Error("ParsePurpose(tpu): no error")
	}
}
