package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/strata-llm/strata/setup/testbed"
)

// TestRelay drives relay with a fake HMP monitor that echoes like QEMU's
// (escape sequences, CRLF, a prompt after each answer) and checks that the
// guest gets each command's output, unquoted, under its own ID, and that
// lines which are not requests are ignored.
func TestRelay(t *testing.T) {
	t.Parallel()
	guest, serial := net.Pipe()
	monitor, mon := net.Pipe()
	var log strings.Builder
	done := make(chan error, 1)
	go func() { done <- relay(serial, mon, &log) }()
	go func() {
		r := bufio.NewReader(monitor)
		fmt.Fprint(monitor, "QEMU 7.2.15 monitor - type 'help' for more information\r\n(qemu) ")
		for {
			cmd, err := r.ReadString('\n')
			if err != nil {
				return
			}
			cmd = strings.TrimSpace(cmd)
			out := ""
			if strings.HasPrefix(cmd, "info") {
				out = "line one\r\nline \"two\"\r\n"
			}
			fmt.Fprintf(monitor, "\x1b[K%s\r\n%s(qemu) ", cmd, out)
		}
	}()
	gr := bufio.NewReader(guest)
	for i, tc := range []struct{ cmd, want string }{
		{`qemu-io n2n1 "break read_aio t"`, ""},
		{"info block", "line one\nline \"two\""},
	} {
		id := fmt.Sprint(i + 1)
		fmt.Fprintf(guest, "console noise\n%s %s %s\n", testbed.HookRequest, id, tc.cmd)
		line, err := gr.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s %s %q\n", testbed.HookReply, id, tc.want)
		if line != want {
			t.Errorf("%s: answer %q, want %q", tc.cmd, line, want)
		}
	}
	guest.Close()
	if err := <-done; err == nil {
		t.Error("relay kept going after the guest's side closed")
	}
	if !strings.Contains(log.String(), "break read_aio") {
		t.Errorf("log %q does not show the requests", log.String())
	}
}
