package kernels

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPTXUpToDate fails when a CUDA source (or a generated PTX) no longer
// matches the hashes gen.sh recorded: a .cu edited without re-running
// gen.sh, or hand-edited PTX. It needs no GPU and no nvcc.
func TestPTXUpToDate(t *testing.T) {
	srcs, err := filepath.Glob("*.cu")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no CUDA sources: %v", err)
	}
	if len(srcs) != len(families) {
		t.Errorf("%d .cu files but %d kernel families are loaded: update families in kernels.go", len(srcs), len(families))
	}
	for _, src := range srcs {
		name := strings.TrimSuffix(src, ".cu")
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("ptx", name+".sum"))
			if err != nil {
				t.Fatalf("%v: run kernels/gen.sh", err)
			}
			defer f.Close()
			seen := map[string]bool{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "#") || line == "" {
					continue
				}
				want, file, ok := strings.Cut(line, "  ")
				if !ok {
					t.Fatalf("bad line %q in %s.sum", line, name)
				}
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%s.sum lists %s: %v", name, file, err)
				}
				sum := sha256.Sum256(b)
				if got := hex.EncodeToString(sum[:]); got != want {
					t.Errorf("%s changed since its PTX was generated (sha256 %s, recorded %s): run kernels/gen.sh", file, got, want)
				}
				seen[file] = true
			}
			for _, need := range []string{src, "common.cuh", "ptx/" + name + ".compute_61.ptx", "ptx/" + name + ".compute_80.ptx"} {
				if !seen[need] {
					t.Errorf("%s.sum does not cover %s: run kernels/gen.sh", name, need)
				}
			}
		})
	}
}

func TestPTXArch(t *testing.T) {
	for _, tc := range []struct {
		maj, min int
		want     string
	}{{6, 1, "compute_61"}, {7, 5, "compute_61"}, {8, 0, "compute_80"}, {8, 9, "compute_80"}, {9, 0, "compute_80"}, {10, 0, "compute_80"}, {6, 0, ""}, {5, 2, ""}} {
		got, err := PTXArch(tc.maj, tc.min)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("PTXArch(%d.%d) = %q, %v; want %q", tc.maj, tc.min, got, err, tc.want)
		}
	}
}

func TestEmbeddedEntries(t *testing.T) {
	for _, arch := range []string{"compute_61", "compute_80"} {
		n := 0
		for _, fam := range families {
			b, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
			if err != nil {
				t.Fatal(err)
			}
			n += len(entryNames(b))
		}
		// 72 GEMV + 9 GEMM + 9 embed + rmsnorm, rope, 5 element-wise,
		// 3 attention, 2 sampling; GEMM v5: 9 dequantizers, x16 and the
		// f16 configurations; fused decode: gemv_fused_1/2, add_rmsnorm,
		// rope_store; 6 tiled prefill attention variants. bf16_unpack.
		// Integer GEMV: gemvq_x, gemvq_fused_1/2/u2_1, gemvq_staged_1/2,
		// gemvq_q6k_1/2.
		if want := 72 + 9 + 9 + 1 + 1 + 5 + 3 + 2 + 10 + len(gemmConfigs) + 4 + 6 + 1 + 8; n != want {
			t.Errorf("%s: %d kernels embedded, want %d", arch, n, want)
		}
	}
}
