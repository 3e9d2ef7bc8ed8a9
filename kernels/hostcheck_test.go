package kernels

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostBuildQ6KA builds the Q6KA device code (gemvq.cu's q6ka_relay
// and QW6::load_a, gemv.cu's DQ6KA, common.cuh's Part<T_Q6_KA>) for the
// host with g++ (testdata/hostcheck/q6ka_check.cpp) and runs it: the
// re-laid reads must equal the Q6_K ones for every alignment. It runs the
// CUDA source itself where TestRelayQ6KHost checks a Go transcription,
// and needs no GPU; it skips where g++ is missing (setup/deps.sh installs
// it).
func TestHostBuildQ6KA(t *testing.T) {
	t.Parallel()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("skipping the host build of the CUDA code: no g++")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("gemv.cu")
	if err != nil {
		t.Fatal(err)
	}
	// DQ6K and DQ6KA, the two structs from "struct DQ6K {" on.
	text := string(src)
	start := strings.Index(text, "struct DQ6K {")
	end := strings.Index(text, "struct DQ6KA : DQ6K {")
	if start < 0 || end < start {
		t.Fatal("gemv.cu: DQ6K and DQ6KA not found")
	}
	stop := strings.Index(text[end:], "\n};\n")
	if stop < 0 {
		t.Fatal("gemv.cu: DQ6KA's end not found")
	}
	inc := text[start : end+stop+4]
	if err := os.WriteFile(filepath.Join(dir, "dq6.inc"), []byte(inc), 0o644); err != nil {
		t.Fatal(err)
	}
	hostCheck(t, gxx, dir, "q6ka_check")
}

// hostCheck builds testdata/hostcheck/NAME.cpp with g++ (the kernels'
// sources, testdata/hostcheck's shims and dir on the include path) and
// runs it; it must print "ok".
func hostCheck(t *testing.T, gxx, dir, name string) {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command(gxx, "-std=c++17", "-O1", "-w", "-DGEMVQ_HOST_CHECK", "-Itestdata/hostcheck", "-I.", "-I"+dir,
		"-o", bin, "testdata/hostcheck/"+name+".cpp")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !bytes.HasPrefix(out, []byte("ok")) {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// TestHostBuildFixed builds the GEMV fixed point (common.cuh's gemv_fx and
// gemv_unfx, which GEMVSliced's kernels and their readers use) and
// elementwise.cu's add_fx for the host with g++
// (testdata/hostcheck/fx_check.cpp) and runs it: the encoding's rounding,
// exact round trips, the poison and its limit over a row's 16 slices, sums
// independent of the order of the additions, add_fx adding and zeroing.
// No GPU needed; it skips where g++ is missing.
func TestHostBuildFixed(t *testing.T) {
	t.Parallel()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("skipping the host build of the CUDA code: no g++")
	}
	hostCheck(t, gxx, t.TempDir(), "fx_check")
}
