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
	t.Parallel()
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
			for _, need := range []string{src, "common.cuh", "ptx/" + name + ".compute_61.ptx", "ptx/" + name + ".compute_80.ptx", "ptx/" + name + ".compute_90.ptx", "ptx/" + name + ".sm_90.cubin"} {
				if !seen[need] {
					t.Errorf("%s.sum does not cover %s: run kernels/gen.sh", name, need)
				}
			}
		})
	}
}

func TestPTXArch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maj, min int
		want     string
	}{{6, 1, "compute_61"}, {7, 5, "compute_61"}, {8, 0, "compute_80"}, {8, 9, "compute_80"}, {9, 0, "compute_90"}, {10, 0, "compute_90"}, {6, 0, ""}, {5, 2, ""}} {
		got, err := PTXArch(tc.maj, tc.min)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("PTXArch(%d.%d) = %q, %v; want %q", tc.maj, tc.min, got, err, tc.want)
		}
	}
}

func TestEmbeddedEntries(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"compute_61", "compute_80", "compute_90"} {
		n := 0
		for _, fam := range families {
			b, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
			if err != nil {
				t.Fatal(err)
			}
			n += len(entryNames(b))
		}
		// 80 GEMV + 10 GEMM + 10 embed (10 weight types, Q6KA's
		// included) + rmsnorm, rope, 6 element-wise, 3 attention, 2
		// sampling; GEMM: 10 dequantizers, x16 and the f16
		// configurations; fused decode: gemv_fused_1/2, add_rmsnorm,
		// rope_store; 3 tiled prefill attention variants. bf16_unpack.
		// Integer GEMV: gemvq_x, gemvq_fused_1/2/u2_1, gemvq_q6k_1/2,
		// gemvq_q6k_s_1/2, gemvq_mixed_1, gemvq_q6ka_1/2,
		// gemvq_mixed_a_1, q6ka_relay, gemvq_p4_1, gemvq_p2u2_1,
		// gemvq_q6ka_r2u2_1, gemvq_mixed_a_w2_1. read_xor
		// (the read-only ceiling). GEMVSliced: gemvq_sk_p,
		// gemvq_sk_q6ka, add_fx, add_fx_rmsnorm. Split pair units:
		// gemvq_ps6_1, gemvq_mixed_s_1. Mixture of experts: moe_logits,
		// moe_topk, moe_gather, moe_combine, moe_stage; the picked
		// experts' gemvq_moe_glu, gemvq_moe_down_q4/_q6.
		if want := 80 + 10 + 10 + 1 + 1 + 6 + 3 + 2 + 11 + len(gemmConfigs) + 4 + 3 + 1 + 17 + 1 + 5 + 2 + 4 + 3; n != want {
			t.Errorf("%s: %d kernels embedded, want %d", arch, n, want)
		}
	}
}

// TestPDLEntries checks which kernels wait for their predecessor (and so
// are launched with cuda.LaunchConfig.Overlap): on compute_90 every kernel
// of a decode step — GEMVs, norms, RoPE, attention, element-wise, sampling —
// the mixture-of-experts routing and bookkeeping between them (moe_*),
// and read_xor, which stands in for the GEMVs when the engine bench times
// their read-only ceiling, and no prefill GEMM or prefill attention kernel;
// below compute_90 none
// (griddepcontrol needs sm_90).
func TestPDLEntries(t *testing.T) {
	t.Parallel()
	decode := []string{"gemv_", "gemvq_", "rmsnorm", "add_rmsnorm", "rope", "rope_store", "attn_decode", "attn_combine",
		"swiglu", "geglu", "softcap", "copy_f32", "add", "add_fx", "add_fx_rmsnorm", "store_kv", "embed_", "argmax", "sample_temp", "read_xor", "moe_"}
	for _, arch := range []string{"compute_61", "compute_80", "compute_90"} {
		waiting := 0
		for _, fam := range families {
			b, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries(b) {
				want := false
				for _, p := range decode {
					if e.name == p || (strings.HasSuffix(p, "_") && strings.HasPrefix(e.name, p)) {
						want = arch == "compute_90"
					}
				}
				if e.waits != want {
					t.Errorf("%s %s: waits %v, want %v", arch, e.name, e.waits, want)
				}
				if e.waits {
					waiting++
				}
			}
		}
		t.Logf("%s: %d kernels wait for their predecessor", arch, waiting)
	}
}

func TestEntriesParse(t *testing.T) {
	t.Parallel()
	ptx := []byte(".visible .entry a(\n.param .u64 p\n)\n{\n\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n\tret;\n}\n" +
		".visible .entry b(\n)\n{\n\tret;\n}\n.visible .entry c(\n)\n{\n\tgriddepcontrol.launch_dependents;\n\tret;\n}\n")
	got := entries(ptx)
	want := []entry{{"a", true}, {"b", false}, {"c", false}}
	if len(got) != len(want) {
		t.Fatalf("entries = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestMaxL1KernelsEmbedded: every kernel Load gives the largest-L1
// preference (maxL1Kernels) is an entry of the PTX the devices that take
// the preference load (compute_80 and compute_90), so a rename cannot
// silently drop it.
func TestMaxL1KernelsEmbedded(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"compute_80", "compute_90"} {
		have := map[string]bool{}
		for _, fam := range families {
			b, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range entryNames(b) {
				have[n] = true
			}
		}
		for _, n := range maxL1Kernels {
			if !have[n] {
				t.Errorf("%s: maxL1Kernels names %q, which no PTX family embeds", arch, n)
			}
		}
	}
}
