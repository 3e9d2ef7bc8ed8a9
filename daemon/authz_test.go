package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/daemon/openai"
)

// Ids used for the second-uid test: nobody, plus two groups that exist
// only as numbers (the kernel does not need them in /etc/group).
const (
	nobody     = 65534
	sockGID    = 47011 // group owning the socket
	adminGID   = 47012 // the admin group
	exitNoDial = 3
)

// TestSecondUID runs real clients as uid 65534 against a daemon running
// as root: an ordinary member of the socket group may infer and read
// status but not load or unload; a member of the admin group may; a
// process outside the socket group cannot even connect.
func TestSecondUID(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as a second uid (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "strata-authz")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := start(t, opts{dir: dir, cfg: Config{AdminGroup: strconv.Itoa(adminGID)}})
	if err := os.Chown(h.sock, 0, sockGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h.sock, 0o660); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		groups []uint32
		expect string // what the helper must find
		code   int
	}{
		{"socket group member", []uint32{sockGID}, "user", 0},
		{"admin group member", []uint32{sockGID, adminGID}, "admin", 0},
		{"outsider", nil, "user", exitNoDial},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = append(os.Environ(), "STRATA_TEST_HELPER=1", "STRATA_TEST_SOCK="+h.sock, "STRATA_TEST_EXPECT="+tc.expect)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: tc.groups}}
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Fatalf("helper exited %d, want %d:\n%s", code, tc.code, out)
			}
			t.Logf("helper: %s", out)
		})
	}
	// Nothing the refused clients asked for happened.
	st, err := h.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Models) != 1 {
		t.Fatalf("models after the test: %+v", st.Models)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// helperMain is the client side of TestSecondUID, run in a child process
// as uid 65534. It exits 0 when the daemon treated it as expected, 3 when
// it could not connect, 1 otherwise.
func helperMain() int {
	ctx := context.Background()
	c := client.New(os.Getenv("STRATA_TEST_SOCK"), "")
	admin := os.Getenv("STRATA_TEST_EXPECT") == "admin"
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "uid %d: "+format+"\n", append([]any{os.Getuid()}, a...)...)
		return 1
	}
	if _, err := c.Models(ctx); err != nil {
		if errors.Is(err, client.ErrUnreachable) {
			fmt.Fprintf(os.Stderr, "uid %d cannot connect: %v\n", os.Getuid(), err)
			return exitNoDial
		}
		return fail("models: %v", err)
	}
	if _, err := c.Chat(ctx, openai.ChatRequest{Model: tiny, Messages: []openai.ChatMessage{{Role: "user", Content: "hi"}}}, nil); err != nil {
		return fail("chat: %v", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return fail("status: %v", err)
	}
	if st.Admin != admin {
		return fail("status says admin=%v, want %v (peer %s)", st.Admin, admin, st.Peer)
	}
	_, err = c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: "by-helper"})
	var ae *client.APIError
	if !admin {
		if !errors.As(err, &ae) || ae.Status != 403 {
			return fail("load as non-admin: %v, want 403", err)
		}
		_, err = c.Unload(ctx, tiny)
		if !errors.As(err, &ae) || ae.Status != 403 {
			return fail("unload as non-admin: %v, want 403", err)
		}
		fmt.Printf("uid %d (non-admin): inference and status allowed, load and unload refused\n", os.Getuid())
		return 0
	}
	if err != nil {
		return fail("load as admin: %v", err)
	}
	if _, err := c.Unload(ctx, "by-helper"); err != nil {
		return fail("unload as admin: %v", err)
	}
	fmt.Printf("uid %d (admin group): load and unload allowed\n", os.Getuid())
	return 0
}
