package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/strata-llm/strata/setup/testbed"
)

// hooks relays the guest's monitor requests (testbed.Monitor) from the
// hook serial socket to QEMU's HMP monitor socket until it is killed,
// reconnecting when QEMU restarts (run.sh boots again after a crash).
func hooks(args []string) error {
	fs := flag.NewFlagSet("hooks", flag.ContinueOnError)
	mon := fs.String("monitor", "", "QEMU's HMP monitor socket")
	serial := fs.String("serial", "", "the socket behind the guest's hook serial port")
	logPath := fs.String("log", "", "where to log each request and answer (default stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *mon == "" || *serial == "" {
		return errors.New("hooks needs -monitor and -serial")
	}
	var log io.Writer = os.Stderr
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		log = f
	}
	for {
		s, err := dialRetry(*serial)
		if err != nil {
			return err
		}
		m, err := dialRetry(*mon)
		if err != nil {
			s.Close()
			return err
		}
		err = relay(s, m, log)
		fmt.Fprintf(log, "connection ended: %v\n", err)
		s.Close()
		m.Close()
	}
}

// dialRetry connects to a Unix socket QEMU will create, waiting for it.
func dialRetry(path string) (net.Conn, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// relay answers the guest's requests on serial with the monitor's output.
func relay(serial io.ReadWriter, mon io.ReadWriter, log io.Writer) error {
	mr := bufio.NewReader(mon)
	if _, err := readPrompt(mr); err != nil { // the banner
		return fmt.Errorf("monitor: %w", err)
	}
	sr := bufio.NewReader(serial)
	for {
		line, err := sr.ReadString('\n')
		if err != nil {
			return err
		}
		f := strings.SplitN(strings.TrimRight(line, "\r\n"), " ", 3)
		if len(f) < 3 || f[0] != testbed.HookRequest {
			continue
		}
		id, cmd := f[1], f[2]
		if _, err := fmt.Fprintf(mon, "%s\n", cmd); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		out, err := readPrompt(mr)
		if err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		// The monitor echoes the command line first.
		if _, rest, ok := strings.Cut(out, "\n"); ok {
			out = rest
		} else {
			out = ""
		}
		out = strings.TrimSpace(out)
		fmt.Fprintf(log, "%s %s %q → %q\n", time.Now().Format(time.TimeOnly), id, cmd, out)
		if _, err := fmt.Fprintf(serial, "%s %s %s\n", testbed.HookReply, id, strconv.Quote(out)); err != nil {
			return err
		}
	}
}

// readPrompt reads the monitor's output up to its next "(qemu) " prompt,
// with carriage returns and terminal escape sequences removed.
func readPrompt(r *bufio.Reader) (string, error) {
	const prompt = "(qemu) "
	var b bytes.Buffer
	for !bytes.HasSuffix(b.Bytes(), []byte(prompt)) {
		c, err := r.ReadByte()
		if err != nil {
			return b.String(), err
		}
		b.WriteByte(c)
	}
	out := b.Bytes()[:b.Len()-len(prompt)]
	var clean []byte
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '\r':
		case c == 0x1b: // ESC [ parameters final-byte
			i++
			if i < len(out) && out[i] == '[' {
				i++
				for i < len(out) && (out[i] < 0x40 || out[i] > 0x7e) {
					i++
				}
			}
		default:
			clean = append(clean, c)
		}
	}
	return string(clean), nil
}
