// Command bedcheck is the host side of the VM test-bed (setup/testbed/run.sh).
//
//	bedcheck fill FILE TAG SIZE      write an NVMe image holding testbed.Pattern(TAG)
//	bedcheck check -dir D -log L -tests LIST [-passed T1,T2]
//	                                  read the guest's console log L: every test in LIST
//	                                  must report PASS, every TESTBED-EXPECT(-NOT)
//	                                  line must hold for the backing files in D, and
//	                                  each Go test named by -passed must have printed
//	                                  "--- PASS: T" (not skipped, not filtered away)
//	bedcheck hooks -monitor M -serial S [-log L]
//	                                  relay the guest's testbed.Monitor requests from
//	                                  the hook serial socket S to QEMU's HMP monitor
//	                                  socket M until killed
//	bedcheck volume -gguf M -pool P -img I -name N [-fault-layer L]
//	                                  prefab M into P, format I as a strata volume of
//	                                  4 KiB blocks holding P as extent N; print shell
//	                                  assignments (extent offset, blkdebug sector of L)
//
// It exits 1 when a check fails and 2 on bad usage.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/setup/testbed"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "fill":
		err = fill(os.Args[2:])
	case "volume":
		err = volumeImage(os.Args[2:])
	case "hooks":
		err = hooks(os.Args[2:])
	case "check":
		var failed bool
		failed, err = check(os.Args[2:], os.Stdout)
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bedcheck:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bedcheck fill FILE TAG SIZE | bedcheck check -dir D -log L -tests LIST [-passed T1,T2] | bedcheck hooks -monitor M -serial S [-log L] | bedcheck volume -gguf M -pool P -img I -name N [-fault-layer L]")
	os.Exit(2)
}

func fill(args []string) error {
	if len(args) != 3 {
		usage()
	}
	tag, err := strconv.Atoi(args[1])
	if err != nil || tag < 0 || tag > 255 {
		return fmt.Errorf("bad tag %q", args[1])
	}
	size, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil || size <= 0 || size%8 != 0 {
		return fmt.Errorf("bad size %q", args[2])
	}
	f, err := os.Create(args[0])
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		testbed.Pattern(tag, off, buf[:n])
		if _, err := w.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// backing maps the names tests use to the files run.sh creates.
func backing(dir, name string) (string, bool) {
	switch name {
	case "nvme0n1", "nvme0n2", "nvme1n1":
		return filepath.Join(dir, name+".img"), true
	case "ivshmem":
		return filepath.Join(dir, "ivshmem.bin"), true
	}
	return "", false
}

// check returns failed=true when a test or an expectation failed; err is for
// problems running the check itself.
func check(args []string, out io.Writer) (failed bool, err error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of the backing files")
	logPath := fs.String("log", "", "guest console log")
	list := fs.String("tests", "", "the guest's /tests/list")
	passed := fs.String("passed", "", "comma-separated Go tests that must have passed (not skipped) in the guest")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	logData, err := os.ReadFile(*logPath)
	if err != nil {
		return false, err
	}
	var want []string
	if *list != "" {
		l, err := os.ReadFile(*list)
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(l), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				want = append(want, f[0])
			}
		}
	}
	fail := func(format string, a ...any) {
		failed = true
		fmt.Fprintf(out, "bedcheck: FAIL "+format+"\n", a...)
	}
	results := map[string]string{}
	goTests := map[string]string{} // Go test name → PASS, FAIL or SKIP from -test.v
	done := false
	var expects [][]string
	for _, raw := range strings.Split(string(logData), "\n") {
		line := strings.TrimRight(raw, "\r")
		if j := strings.Index(line, "--- "); j >= 0 {
			if g := strings.Fields(line[j+4:]); len(g) >= 2 && strings.HasSuffix(g[0], ":") {
				goTests[g[1]] = strings.TrimSuffix(g[0], ":")
			}
		}
		i := strings.Index(line, "TESTBED-")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i:])
		switch f[0] {
		case "TESTBED-RESULT":
			if len(f) >= 3 {
				results[f[1]] = f[2]
				fmt.Fprintf(out, "bedcheck: %s %s\n", f[1], strings.Join(f[2:], " "))
			}
		case "TESTBED-DONE":
			done = true
		case "TESTBED-ERROR":
			fail("guest: %s", strings.Join(f[1:], " "))
		case "TESTBED-EXPECT", "TESTBED-EXPECT-NOT":
			expects = append(expects, f)
		}
	}
	checked, superseded := 0, 0
	for i, f := range expects {
		if later := supersededBy(f, expects[i+1:]); later != "" {
			// The files hold the state after power-off: a later write to
			// the same bytes wins, and only it can be checked.
			superseded++
			fmt.Fprintf(out, "bedcheck: note: %s %s@%s+%s superseded by a later expectation of %s\n", f[0], f[1], f[2], f[3], later)
			continue
		}
		checked++
		if err := expectation(*dir, f); err != nil {
			fail("%s", err)
		}
	}
	if !done {
		fail("the guest never reported TESTBED-DONE (crash, hang or timeout)")
	}
	for _, name := range want {
		switch r := results[name]; r {
		case "PASS":
		case "":
			fail("%s reported no result", name)
		default:
			fail("%s: %s", name, r)
		}
	}
	for _, name := range strings.Split(*passed, ",") {
		if name == "" {
			continue
		}
		switch r := goTests[name]; r {
		case "PASS":
		case "":
			fail("Go test %s never ran (filtered away, or its binary died first)", name)
		default:
			fail("Go test %s: %s (must pass here, not skip)", name, r)
		}
	}
	fmt.Fprintf(out, "bedcheck: %d tests, %d host-side expectations checked (%d superseded)\n", len(want), checked, superseded)
	return failed, nil
}

// supersededBy names the test of the first later TESTBED-EXPECT whose byte
// range overlaps f's in the same file, or returns "".
func supersededBy(f []string, later [][]string) string {
	if len(f) < 4 {
		return ""
	}
	off, err1 := strconv.ParseInt(f[2], 10, 64)
	n, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return ""
	}
	for _, g := range later {
		if len(g) < 4 || g[0] != "TESTBED-EXPECT" || g[1] != f[1] {
			continue
		}
		o, err1 := strconv.ParseInt(g[2], 10, 64)
		m, err2 := strconv.ParseInt(g[3], 10, 64)
		if err1 == nil && err2 == nil && o < off+n && off < o+m {
			if len(g) > 5 {
				return g[5]
			}
			return "a later test"
		}
	}
	return ""
}

// expectation checks one "TESTBED-EXPECT[-NOT] FILE OFFSET LEN SHA256 TEST" line.
func expectation(dir string, f []string) error {
	if len(f) < 5 {
		return fmt.Errorf("malformed line %q", strings.Join(f, " "))
	}
	neg := f[0] == "TESTBED-EXPECT-NOT"
	path, ok := backing(dir, f[1])
	off, err1 := strconv.ParseInt(f[2], 10, 64)
	n, err2 := strconv.ParseInt(f[3], 10, 64)
	sum, err3 := hex.DecodeString(f[4])
	if !ok || err1 != nil || err2 != nil || err3 != nil || off < 0 || n <= 0 || n > 1<<30 || len(sum) != sha256.Size {
		return fmt.Errorf("malformed line %q", strings.Join(f, " "))
	}
	test := ""
	if len(f) > 5 {
		test = f[5]
	}
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	buf := make([]byte, n)
	if _, err := fh.ReadAt(buf, off); err != nil {
		return fmt.Errorf("%s: reading %d bytes at %d of %s: %v", test, n, off, f[1], err)
	}
	got := sha256.Sum256(buf)
	match := bytes.Equal(got[:], sum)
	switch {
	case neg && match:
		return fmt.Errorf("%s: %s holds at %d the %d bytes that must not be there", test, f[1], off, n)
	case !neg && !match:
		return fmt.Errorf("%s: %s at %d (%d bytes) differs from what the guest expects (first bytes on the host: %x)", test, f[1], off, n, buf[:min(16, len(buf))])
	}
	return nil
}
