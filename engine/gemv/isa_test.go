package gemv

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestKernelsRequireOnlyTheirISA: every generated kernel needs only the
// instruction sets its family's available() checks. avo names them in a
// "Requires" line above each TEXT; an operand form that exists only in a
// later set (a shift's memory source, say, which is AVX-512 only) makes
// the assembler choose that set's encoding, which runs here (this machine
// may have it) but faults on a CPU without it.
func TestKernelsRequireOnlyTheirISA(t *testing.T) {
	t.Parallel()
	allowed := map[string]map[string]bool{
		// MMX+ is avo's name for PREFETCHh's set, which every x86-64 CPU
		// has (SSE is in the base ISA).
		"AVX2": {"AVX": true, "AVX2": true, "F16C": true, "FMA3": true, "BMI2": true, "MMX+": true},
		// available(AVX512) is AVX2's with F, BW, VL and DQ.
		"AVX512": {"AVX": true, "AVX2": true, "F16C": true, "FMA3": true, "BMI2": true, "MMX+": true,
			"AVX512F": true, "AVX512BW": true, "AVX512VL": true, "AVX512DQ": true},
		// The VNNI kernels are chosen where AVX512's are and the CPU has
		// VNNI (avx512Kernels, panelWanted).
		"VNNI": {"AVX": true, "AVX2": true, "F16C": true, "FMA3": true, "BMI2": true, "MMX+": true,
			"AVX512F": true, "AVX512BW": true, "AVX512VL": true, "AVX512DQ": true, "AVX512VNNI": true},
	}
	src, err := os.ReadFile("zkernels_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^// Requires: (.*)\nTEXT ·(\w+)\(SB\)`)
	kernels := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		name := m[2]
		for family, sets := range allowed {
			// The family anywhere in the name: its four-vector kernels
			// end in x4 (q4kAVX2x4).
			if !strings.Contains(name, family) {
				continue
			}
			kernels++
			for _, s := range strings.Split(m[1], ", ") {
				if !sets[s] {
					t.Errorf("%s requires %s, which %v does not check for", name, s, family)
				}
			}
		}
	}
	if kernels == 0 {
		t.Fatal("no kernels found in zkernels_amd64.s")
	}
}
