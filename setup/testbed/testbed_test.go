package testbed

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestVM boots the whole VM test-bed (run.sh): several minutes under TCG, so
// it runs only when asked with STRATA_TESTBED_RUN=1 and `go test ./...` stays
// fast.
func TestVM(t *testing.T) {
	t.Parallel()
	if os.Getenv("STRATA_TESTBED_RUN") != "1" {
		t.Skip("boots the QEMU test-bed (minutes); set STRATA_TESTBED_RUN=1 to run it")
	}
	if os.Getenv("STRATA_TESTBED") == "1" {
		t.Skip("already inside the test-bed guest")
	}
	start := time.Now()
	cmd := exec.Command("bash", "run.sh")
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "STRATA_TESTBED_LOG="+filepath.Join(t.TempDir(), "console.log"))
	if err := cmd.Run(); err != nil {
		t.Fatalf("test-bed failed after %v: %v", time.Since(start).Round(time.Second), err)
	}
	t.Logf("test-bed passed in %v", time.Since(start).Round(100*time.Millisecond))
}

func TestPattern(t *testing.T) {
	t.Parallel()
	b := make([]byte, 24)
	Pattern(3, 8, b)
	for i := 0; i < 3; i++ {
		if w := binary.LittleEndian.Uint64(b[8*i:]); w != PatternWord(3, int64(8+8*i)) {
			t.Fatalf("word %d = %#x", i, w)
		}
	}
	// An unaligned start continues the same words.
	u := make([]byte, 13)
	Pattern(3, 11, u)
	want := make([]byte, 32)
	Pattern(3, 8, want)
	if string(u) != string(want[3:16]) {
		t.Fatalf("unaligned pattern %x, want %x", u, want[3:16])
	}
	if PatternWord(1, 4096) != 0x0100000000001000 {
		t.Fatalf("PatternWord(1, 4096) = %#x", PatternWord(1, 4096))
	}
}

func TestRequireSkipsOutsideTheGuest(t *testing.T) {
	t.Parallel()
	if os.Getenv("STRATA_TESTBED") == "1" {
		t.Skip("inside the guest")
	}
	ran := false
	t.Run("inner", func(t *testing.T) {
		Require(t)
		ran = true
	})
	if ran {
		t.Fatal("Require did not skip outside the test-bed")
	}
}

func TestRequireIOMMUOffSkipsElsewhere(t *testing.T) {
	t.Parallel()
	if os.Getenv(IOMMUOffEnv) == "off" {
		t.Skip("inside the IOMMU-off guest")
	}
	ran := false
	t.Run("inner", func(t *testing.T) {
		RequireIOMMUOff(t)
		ran = true
	})
	if ran {
		t.Fatal("RequireIOMMUOff did not skip outside the IOMMU-off boot")
	}
}
