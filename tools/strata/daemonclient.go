package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/daemon/client"
)

// Exit codes of the daemon commands (chat, complete, models, status,
// load, unload), beyond main's 0/1/2. Scripts can rely on them.
const (
	exitUnreachable = 3 // no daemon answers on the socket
	exitDenied      = 4 // the daemon refused: not authorised (401/403)
	exitNotFound    = 5 // unknown model or model file (404)
	exitBusy        = 6 // queue full, model unloading or shutting down (429/503)
)

// codedError carries an exit code through urfave/cli, which prints the
// message and exits with the code.
type codedError struct {
	err  error
	code int
}

func (e codedError) Error() string { return "strata: " + e.err.Error() }
func (e codedError) ExitCode() int { return e.code }
func (e codedError) Unwrap() error { return e.err }

// clientErr maps a client error to the documented exit codes.
func clientErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return codedError{err, exitError}
	}
	var ae *client.APIError
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return codedError{fmt.Errorf("%w (is stratad running? set --socket or STRATA_SOCKET)", err), exitUnreachable}
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return codedError{err, exitDenied}
		case http.StatusNotFound:
			return codedError{err, exitNotFound}
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			return codedError{err, exitBusy}
		}
	}
	return codedError{err, exitError}
}

// daemonFlags are shared by every command that talks to stratad.
func daemonFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "socket", Value: client.DefaultSocket, Sources: cli.EnvVars("STRATA_SOCKET"),
			Usage: "stratad's Unix socket, or an http://HOST:PORT URL for its TCP listener"},
		&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("STRATA_API_KEY"), Usage: "API key for a TCP URL"},
	}, extra...)
}

var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print the daemon's JSON response instead of text"}

func dial(cmd *cli.Command) *client.Client {
	return client.New(cmd.String("socket"), cmd.String("api-key"))
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseBytes reads a byte count: a plain integer or one with a K, M, G or
// T suffix (powers of 1024; "KiB"/"KB"/"K" all accepted).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	up := strings.ToUpper(s)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		for _, form := range []string{u.suf + "IB", u.suf + "B", u.suf} {
			if strings.HasSuffix(up, form) {
				up, mult = strings.TrimSuffix(up, form), u.m
				goto num
			}
		}
	}
num:
	n, err := strconv.ParseInt(strings.TrimSpace(up), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return n * mult, nil
}

// firstModel picks the model to use when --model is not given: the only
// (or first) loaded model.
func firstModel(ctx context.Context, c *client.Client) (string, error) {
	l, err := c.Models(ctx)
	if err != nil {
		return "", clientErr(err)
	}
	if len(l.Data) == 0 {
		return "", codedError{errors.New("stratad has no model loaded (load one with `strata load`)"), exitNotFound}
	}
	return l.Data[0].ID, nil
}
