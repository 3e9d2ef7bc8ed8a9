package hostcheck

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Status grades one check.
type Status string

// Grades, from good to bad.
const (
	// Pass: strata can use this as it is.
	Pass Status = "pass"
	// Warn: strata runs, slower or with fewer routes; the fix says how to
	// get the rest.
	Warn Status = "warn"
	// Fail: the feature the check is about cannot work until fixed.
	Fail Status = "fail"
)

func (s Status) rank() int {
	switch s {
	case Fail:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// Result is one line of the report.
type Result struct {
	// ID names the check ("iommu", "vfio-modules", "iommu-group 0000:01:00.0"…),
	// stable for scripts reading --json.
	ID     string `json:"id"`
	Status Status `json:"status"`
	// Summary is the one-line finding.
	Summary string `json:"summary"`
	// Details are the facts behind it, one per line.
	Details []string `json:"details,omitempty"`
	// Fix says what to do, empty on pass.
	Fix string `json:"fix,omitempty"`
}

// Route is the DMA route the daemon would pick for tier-C reads.
type Route struct {
	// Kind is "peer-bar", "host-pinned" (topology.Kind values) or "file" (the
	// kernel's block driver with O_DIRECT, no userspace NVMe driver).
	Kind string `json:"kind"`
	// NVMe and GPU are the devices the route joins ("" when none).
	NVMe string `json:"nvme,omitempty"`
	GPU  string `json:"gpu,omitempty"`
	// Why explains the choice; NotChosen says why each better route lost.
	Why       string   `json:"why"`
	NotChosen []string `json:"not_chosen,omitempty"`
}

// Report is everything Check found.
type Report struct {
	Kernel  string   `json:"kernel"`
	Results []Result `json:"results"`
	Route   Route    `json:"route"`
}

// Worst is the worst status in the report.
func (r Report) Worst() Status {
	w := Pass
	for _, x := range r.Results {
		if x.Status.rank() > w.rank() {
			w = x.Status
		}
	}
	return w
}

// Find returns the first result whose ID is id or starts with id + " ".
func (r Report) Find(id string) (Result, bool) {
	for _, x := range r.Results {
		if x.ID == id || strings.HasPrefix(x.ID, id+" ") {
			return x, true
		}
	}
	return Result{}, false
}

// WriteText renders the report for a terminal: one line per check, its
// details and fix indented below.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "strata setup check — kernel %s\n", r.Kernel)
	counts := map[Status]int{}
	for _, x := range r.Results {
		counts[x.Status]++
		fmt.Fprintf(&b, "%-4s  %-28s %s\n", strings.ToUpper(string(x.Status)), x.ID, x.Summary)
		for _, d := range x.Details {
			fmt.Fprintf(&b, "      %s\n", d)
		}
		if x.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", x.Fix)
		}
	}
	fmt.Fprintf(&b, "route: %s", r.Route.Kind)
	if r.Route.NVMe != "" {
		fmt.Fprintf(&b, " (nvme %s", r.Route.NVMe)
		if r.Route.GPU != "" {
			fmt.Fprintf(&b, " → gpu %s", r.Route.GPU)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ": %s\n", r.Route.Why)
	for _, n := range r.Route.NotChosen {
		fmt.Fprintf(&b, "      not %s\n", n)
	}
	fmt.Fprintf(&b, "%d pass, %d warn, %d fail\n", counts[Pass], counts[Warn], counts[Fail])
	_, err := io.WriteString(w, b.String())
	return err
}

// A Purpose is what the host is for: which checks its verdict weighs.
type Purpose string

// The purposes Verdict knows; PurposeAll weighs every check.
const (
	PurposeAll  Purpose = ""
	PurposeCPU  Purpose = "cpu"  // models on the CPU backend, tier C from files
	PurposeGPU  Purpose = "gpu"  // a GPU beside, tiers B and C over PCIe from host memory and files
	PurposeNVMe Purpose = "nvme" // the userspace NVMe driver, peer-to-peer into the GPU
)

// needs are the checks (IDs, or ID prefixes before a space) each purpose
// depends on; PurposeNVMe and PurposeAll depend on all of them.
var needs = map[Purpose][]string{
	PurposeCPU: {"memlock", "hugepages"},
	PurposeGPU: {"memlock", "hugepages", "nvidia-driver"},
}

// musts are the checks a purpose cannot do without: a warning on one of
// them (no GPU driver loaded, VFIO not usable because there is no NVMe
// controller to drive) fails the purpose.
var musts = map[Purpose][]string{
	PurposeGPU:  {"nvidia-driver"},
	PurposeNVMe: {"iommu", "vfio-modules", "vfio-dev"},
}

// ParsePurpose reads a --for value.
func ParsePurpose(s string) (Purpose, error) {
	switch p := Purpose(strings.ToLower(strings.TrimSpace(s))); p {
	case PurposeAll, PurposeCPU, PurposeGPU, PurposeNVMe:
		return p, nil
	}
	return "", fmt.Errorf("unknown purpose %q (cpu, gpu or nvme)", s)
}

// Verdict is the worst status among the checks p depends on, and those of
// them that fail.
func (r Report) Verdict(p Purpose) (Status, []string) {
	ids, some := needs[p]
	is := func(x Result) func(string) bool {
		return func(id string) bool { return x.ID == id || strings.HasPrefix(x.ID, id+" ") }
	}
	w := Pass
	var failing []string
	for _, x := range r.Results {
		if some && !slices.ContainsFunc(ids, is(x)) && !slices.ContainsFunc(musts[p], is(x)) {
			continue
		}
		st := x.Status
		if st == Warn && slices.ContainsFunc(musts[p], is(x)) {
			st = Fail
		}
		if st.rank() > w.rank() {
			w = st
		}
		if st == Fail {
			failing = append(failing, x.ID)
		}
	}
	return w, failing
}
