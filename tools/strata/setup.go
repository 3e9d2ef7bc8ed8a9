package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

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
				"Exit status 1 when a check the host's purpose (--for) depends on fails. Run as root to see ACS settings (extended PCI config space).",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
				&cli.StringFlag{Name: "root", Usage: "check the host tree mounted here instead of / (sys/, proc/, dev/, boot/, lib/modules/)"},
				&cli.StringFlag{Name: "for", Usage: "what the host is for, which decides the exit status: cpu (the CPU backend), gpu (a GPU beside it), nvme (the userspace NVMe driver and peer-to-peer: every check) (default: every check)"},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 0 {
					return usagef("setup check: takes no arguments")
				}
				purpose, err := hostcheck.ParsePurpose(cmd.String("for"))
				if err != nil {
					return usagef("--for: %v", err)
				}
				rep := hostcheck.Check(hostcheck.Options{Root: cmd.String("root")})
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
				verdict, failing := rep.Verdict(purpose)
				if !cmd.Bool("json") && purpose != hostcheck.PurposeAll {
					if verdict == hostcheck.Fail {
						fmt.Printf("for %s: not met (%s failed)\n", purpose, strings.Join(failing, ", "))
					} else {
						fmt.Printf("for %s: met\n", purpose)
					}
				}
				if verdict == hostcheck.Fail {
					return cli.Exit("", exitError)
				}
				return nil
			},
		}},
	}
}
