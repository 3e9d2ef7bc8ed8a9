package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// flagCase is one command line for a command's options: check says
// whether the options it gives are right, or usage is the usage error it
// must give instead.
type flagCase[O any] struct {
	name  string
	args  []string
	check func(o O) bool
	usage string
}

// checkFlags runs each case's arguments through the command mk builds,
// its Action replaced by options (the command's own flags-to-options
// step), and checks the result.
func checkFlags[O any](t *testing.T, mk func() *cli.Command, options func(*cli.Command) (O, error), cases []flagCase[O]) {
	t.Helper()
	parse := func(args ...string) (O, error) {
		cmd := mk()
		var o O
		var perr error
		cmd.Action = func(ctx context.Context, c *cli.Command) error {
			o, perr = options(c)
			return nil
		}
		if err := cmd.Run(context.Background(), append([]string{cmd.Name}, args...)); err != nil {
			return o, err
		}
		return o, perr
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := parse(c.args...)
			if c.usage != "" {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.usage) {
					t.Fatalf("got %v, want a usage error about %q", err, c.usage)
				}
				return
			}
			if err != nil || !c.check(o) {
				t.Fatalf("options %+v, %v", o, err)
			}
		})
	}
}
