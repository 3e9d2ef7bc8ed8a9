package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/setup/testbed"
)

func TestFillAndCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := filepath.Join(dir, "nvme0n1.img")
	if err := fill([]string{img, "1", "65536"}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(img)
	want := make([]byte, 100)
	testbed.Pattern(1, 4093, want)
	if !bytes.Equal(data[4093:4193], want) {
		t.Fatal("fill does not match testbed.Pattern")
	}
	os.WriteFile(filepath.Join(dir, "ivshmem.bin"), []byte("hello, host\x00\x00\x00\x00\x00"), 0o644)
	line := func(kind, file string, off int, b []byte) string {
		s := sha256.Sum256(b)
		return fmt.Sprintf("%s %s %d %d %s TestX", kind, file, off, len(b), hex.EncodeToString(s[:]))
	}
	list := filepath.Join(dir, "list")
	os.WriteFile(list, []byte("vfio\nnvme -test.run=X\n"), 0o644)
	for _, tc := range []struct {
		name   string
		log    []string
		passed string
		failed bool
	}{
		{"all good", []string{
			"[    1.0] kernel noise TESTBED-EXPECT " + strings.TrimPrefix(line("TESTBED-EXPECT", "nvme0n1", 4093, want), "TESTBED-EXPECT "),
			line("TESTBED-EXPECT", "ivshmem", 0, []byte("hello, host")) + "\r",
			line("TESTBED-EXPECT-NOT", "ivshmem", 0, []byte("HELLO")),
			"TESTBED-RESULT vfio PASS rc=0", "TESTBED-RESULT nvme PASS rc=0", "TESTBED-DONE pass=2 fail=0"}, "", false},
		{"wrong bytes", []string{line("TESTBED-EXPECT", "ivshmem", 1, []byte("hello")),
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "", true},
		{"bytes that must not be there", []string{line("TESTBED-EXPECT-NOT", "ivshmem", 0, []byte("hello")),
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "", true},
		{"a test failed", []string{"TESTBED-RESULT vfio FAIL rc=1", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "", true},
		{"a test missing", []string{"TESTBED-RESULT vfio PASS", "TESTBED-DONE"}, "", true},
		{"no done", []string{"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS"}, "", true},
		{"a later write supersedes an earlier one", []string{
			line("TESTBED-EXPECT", "ivshmem", 0, []byte("HELLO")),
			line("TESTBED-EXPECT", "ivshmem", 3, []byte("lo, host")),
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "", false},
		{"required Go tests passed", []string{"--- PASS: TestA (0.01s)", "    --- PASS: TestB/sub (0.00s)", "--- PASS: TestB (0.00s)",
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "TestA,TestB", false},
		{"a required Go test skipped", []string{"--- SKIP: TestA (0.00s)",
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "TestA", true},
		{"a required Go test never ran", []string{"--- PASS: TestAB (0.00s)", "testing: warning: no tests to run",
			"TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "TestA", true},
		{"unknown file", []string{"TESTBED-EXPECT passwd 0 1 00", "TESTBED-RESULT vfio PASS", "TESTBED-RESULT nvme PASS", "TESTBED-DONE"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logPath := filepath.Join(t.TempDir(), "console.log") // its own log: the subtests run in parallel
			os.WriteFile(logPath, []byte(strings.Join(tc.log, "\n")+"\n"), 0o644)
			var out bytes.Buffer
			failed, err := check([]string{"-dir", dir, "-log", logPath, "-tests", list, "-passed", tc.passed}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.failed {
				t.Fatalf("failed=%v, want %v\n%s", failed, tc.failed, out.String())
			}
		})
	}
}
