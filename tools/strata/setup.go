package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/setup/hostcheck"
)

func init() { registerCommand(setupCommand) }

func setupCommand() *cli.Command {
	return &cli.Command{
		Name:  "setup",
		Usage: "check this host for strata",
		Commands: []*cli.Command{{
			Name:  "check",
			Usage: "check the IOMMU, VFIO, PCIe topology, memory limits and GPU driver; say what to fix and which DMA route the daemon would use",
			Description: "Reads sysfs, procfs and /dev and changes nothing. Each line is pass, warn or fail, with the fix.\n" +
				"Exit status 1 when any check fails. Run as root to see ACS settings (extended PCI config space).",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
				&cli.StringFlag{Name: "root", Usage: "check the host tree mounted here instead of / (sys/, proc/, dev/, boot/, lib/modules/)"},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 0 {
					return usagef("setup check: takes no arguments")
				}
				rep := hostcheck.Check(hostcheck.Options{Root: cmd.String("root")})
				var err error
				if cmd.Bool("json") {
					enc := json.NewEncoder(os.Stdout)
					enc.SetIndent("", "  ")
					err = enc.Encode(rep)
				} else {
					err = rep.WriteText(os.Stdout)
				}
				if err != nil {
					return err
				}
				if rep.Worst() == hostcheck.Fail {
					return cli.Exit("", exitError)
				}
				return nil
			},
		}},
	}
}
