package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/daemon/api"
)

func init() { registerBenchCommand(benchColdStartCommand) }

func benchColdStartCommand() *cli.Command {
	return &cli.Command{
		Name: "coldstart",
		Usage: "time stratad from loading a model to its first token, against reading the pool once at the storage speed it measured " +
			"(goal: at most 1.2); the model is unloaded afterwards (needs root or the admin group)",
		ArgsUsage: "PATH | nvme://BDF/NSID/NAME",
		Flags: daemonFlags(
			&cli.StringFlag{Name: "ram-budget", Usage: "host-memory budget, e.g. 8GiB; give one that streams layers, so that the daemon measures the storage"},
			&cli.StringFlag{Name: "vram-budget", Usage: "device-memory budget, e.g. 20GiB"},
			&cli.StringFlag{Name: "prompt", Value: "Hello", Usage: "prompt of the one-token completion"},
			&cli.StringFlag{Name: "name", Usage: "name to load the model under (default: coldstart-<time>)"},
			backendFlag, jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usagef("coldstart needs exactly one model PATH or nvme://BDF/NSID/NAME")
			}
			ram, err := parseBytes(cmd.String("ram-budget"))
			if err != nil {
				return usagef("--ram-budget: %v", err)
			}
			vram, err := parseBytes(cmd.String("vram-budget"))
			if err != nil {
				return usagef("--vram-budget: %v", err)
			}
			r, err := dial(cmd).ColdStart(ctx, api.LoadRequest{Path: cmd.Args().First(), Name: cmd.String("name"),
				Budgets: api.Budgets{RAMBytes: ram, VRAMBytes: vram}, Backend: cmd.String("backend")}, cmd.String("prompt"))
			if err != nil {
				return clientErr(err)
			}
			if cmd.Bool("json") {
				return printJSON(r)
			}
			fmt.Print(r.String())
			return nil
		},
	}
}
