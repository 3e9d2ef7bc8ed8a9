// Command strata is the unprivileged client of stratad and the home of the
// offline model tools (run, model synth/tokenize/inspect). It stays thin: each
// command parses flags and calls into engine/ packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/strata-llm/strata/internal/buildinfo"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v3"
)

// Exit codes scripts can rely on.
const (
	exitOK    = 0
	exitError = 1 // the operation failed
	exitUsage = 2 // bad flags or arguments
)

var log hclog.Logger

func main() {
	log = hclog.New(&hclog.LoggerOptions{
		Name:   "strata",
		Output: os.Stderr,
		Level:  hclog.LevelFromString(envOr("STRATA_LOG", "warn")),
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := rootCommand().Run(ctx, os.Args)
	if err == nil {
		os.Exit(exitOK)
	}
	var ue usageError
	code := exitError
	switch {
	case errors.As(err, &ue):
		code = exitUsage
	case errors.Is(err, fs.ErrNotExist):
		code = exitNotFound // a model (or other) file that is not there
	}
	fmt.Fprintf(os.Stderr, "strata: %v\n", err)
	os.Exit(code)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// usageError marks errors caused by how the command was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func rootCommand() *cli.Command {
	root := &cli.Command{
		Name:     "strata",
		Usage:    "run language models larger than GPU memory",
		Version:  buildinfo.Read().String(),
		Commands: commands(),
	}
	markUsageErrors(root)
	return root
}

// markUsageErrors makes flag-parsing errors of every command, and an
// unknown subcommand of a group, exit with exitUsage rather than the
// generic failure code (urfave/cli's own answer to an unknown command
// exits 3, which scripts read as "stratad unreachable").
func markUsageErrors(c *cli.Command) {
	if c.OnUsageError == nil {
		c.OnUsageError = func(ctx context.Context, cmd *cli.Command, err error, isSubcommand bool) error {
			return usageError{err.Error()}
		}
	}
	for _, f := range c.Flags {
		hideDoubledDefault(f)
	}
	if len(c.Commands) > 0 && c.Action == nil {
		c.Action = func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usagef("unknown command %q (%s --help lists them)", cmd.Args().First(), cmd.FullName())
			}
			return cli.ShowSubcommandHelp(cmd)
		}
	}
	if act := c.Action; act != nil && len(c.Commands) == 0 && strings.TrimSpace(c.ArgsUsage) == "" {
		// A command that takes no arguments refuses them: `strata run
		// model.gguf` must not quietly run the default model.
		c.Action = func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usagef("%s takes no arguments, got %q (%s --help lists its flags)", cmd.FullName(), cmd.Args().First(), cmd.FullName())
			}
			return act(ctx, cmd)
		}
	}
	for _, sub := range c.Commands {
		markUsageErrors(sub)
	}
}

// Each command group lives in its own file and registers itself here with
// an init function, so groups can be added without touching this file.
var (
	commandFactories      []func() *cli.Command // top-level commands
	modelCommandFactories []func() *cli.Command // subcommands of `strata model`
)

func registerCommand(f func() *cli.Command) { commandFactories = append(commandFactories, f) }
func registerModelCommand(f func() *cli.Command) {
	modelCommandFactories = append(modelCommandFactories, f)
}

func commands() []*cli.Command { return build(commandFactories) }

// build makes the commands of one group from its registered factories, in
// registration order.
func build(factories []func() *cli.Command) []*cli.Command {
	cs := make([]*cli.Command, 0, len(factories))
	for _, f := range factories {
		cs = append(cs, f())
	}
	return cs
}

// hideDoubledDefault keeps urfave/cli from appending "(default: …)" to a
// flag whose usage already says its default in words.
func hideDoubledDefault(f cli.Flag) {
	says := func(usage string) bool { return strings.Contains(usage, "(default") }
	switch f := f.(type) {
	case *cli.StringFlag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	case *cli.IntFlag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	case *cli.BoolFlag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	case *cli.FloatFlag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	case *cli.Uint64Flag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	case *cli.DurationFlag:
		f.HideDefault = f.HideDefault || says(f.Usage)
	}
}
