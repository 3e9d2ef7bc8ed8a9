package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
)

func init() { registerCommand(devicesCommand) }

// devicesCommand is `strata devices`: the NVMe controllers stratad may
// own. Everything goes through the daemon; the client never opens
// /dev/vfio or sysfs itself.
func devicesCommand() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "list NVMe controllers and what uses them; bind them to stratad, write pools to them, read their counters",
		Description: "Without a subcommand, lists every NVMe controller with its driver, IOMMU group, model, serial,\n" +
			"namespaces and whatever of the host uses it. bind, unbind, reset, volume format and pool write\n" +
			"need root or the daemon's admin group; listing, stats and volume show are open to any client.",
		Flags: daemonFlags(jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() > 0 {
				return usagef("devices: unknown subcommand %q (list, bind, unbind, reset, stats, volume, pool)", cmd.Args().First())
			}
			return devicesList(ctx, cmd)
		},
		Commands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list NVMe controllers (the default)",
				Flags:  daemonFlags(jsonFlag),
				Action: devicesList,
			},
			{
				Name:      "bind",
				Usage:     "take a controller from the host (vfio-pci) and open it in stratad; refused while mounted, swap or held",
				ArgsUsage: "BDF",
				Flags:     daemonFlags(jsonFlag),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					bdf, err := oneBDF(cmd, "bind")
					if err != nil {
						return err
					}
					b, err := dial(cmd).Bind(ctx, bdf)
					if err != nil {
						return deviceErr(err)
					}
					if cmd.Bool("json") {
						return printJSON(b)
					}
					c := b.Controller
					fmt.Printf("bound %s (%s, serial %s; was on %s): %d namespaces\n", c.BDF, orDash(c.Model), orDash(c.Serial),
						orDash(b.PreviousDriver), len(c.Namespaces))
					for _, ns := range c.Namespaces {
						fmt.Printf("  %s\n", namespaceText(ns))
					}
					return nil
				},
			},
			{
				Name:      "unbind",
				Usage:     "close a controller in stratad and give it back to a kernel driver",
				ArgsUsage: "BDF",
				Flags: daemonFlags(jsonFlag,
					&cli.StringFlag{Name: "driver", Value: "nvme", Usage: "kernel driver to bind the controller to"}),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					bdf, err := oneBDF(cmd, "unbind")
					if err != nil {
						return err
					}
					u, err := dial(cmd).Unbind(ctx, bdf, cmd.String("driver"))
					if err != nil {
						return deviceErr(err)
					}
					if cmd.Bool("json") {
						return printJSON(u)
					}
					fmt.Printf("unbound %s: now on %s\n", u.BDF, orDash(u.Driver))
					return nil
				},
			},
			{
				Name: "reset",
				Usage: "reset a controller stratad holds (disable, enable, queues recreated) while it keeps serving; " +
					"commands in flight are submitted again",
				ArgsUsage: "BDF",
				Flags:     daemonFlags(jsonFlag),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					bdf, err := oneBDF(cmd, "reset")
					if err != nil {
						return err
					}
					r, err := dial(cmd).ResetDevice(ctx, bdf)
					if err != nil {
						return deviceErr(err)
					}
					if cmd.Bool("json") {
						return printJSON(r)
					}
					fmt.Printf("reset %s in %.3fs: %d commands in flight submitted again\n", r.BDF, r.Seconds, r.Resubmitted)
					return nil
				},
			},
			{
				Name:      "stats",
				Usage:     "queue and bandwidth counters of the controllers stratad holds (GB/s over the last second)",
				ArgsUsage: "[BDF]",
				Flags:     daemonFlags(jsonFlag),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.NArg() > 1 {
						return usagef("stats takes at most one BDF")
					}
					st, err := dial(cmd).DeviceStats(ctx, cmd.Args().First())
					if err != nil {
						return deviceErr(err)
					}
					if cmd.Bool("json") {
						return printJSON(st)
					}
					if len(st.Controllers) == 0 {
						fmt.Println("stratad holds no controller (strata devices bind BDF)")
					}
					for _, c := range st.Controllers {
						printControllerStats(c)
					}
					return nil
				},
			},
			{
				Name:  "volume",
				Usage: "strata volumes on the namespaces of held controllers",
				Commands: []*cli.Command{
					{
						Name:      "show",
						Usage:     "show a namespace's volume and its extents",
						ArgsUsage: "BDF NSID",
						Flags:     daemonFlags(jsonFlag),
						Action: func(ctx context.Context, cmd *cli.Command) error {
							bdf, nsid, err := bdfNSID(cmd, "volume show", 2)
							if err != nil {
								return err
							}
							v, err := dial(cmd).Volume(ctx, bdf, nsid)
							if err != nil {
								return deviceErr(err)
							}
							if cmd.Bool("json") {
								return printJSON(v)
							}
							printVolume(v)
							return nil
						},
					},
					{
						Name:      "format",
						Usage:     "write a new, empty strata volume over a namespace (its contents are lost)",
						ArgsUsage: "BDF NSID",
						Flags: daemonFlags(jsonFlag,
							&cli.StringFlag{Name: "label", Usage: "volume label"},
							&cli.StringFlag{Name: "table-size", Usage: "size of each extent-table slot, e.g. 1MiB (default)"},
							&cli.BoolFlag{Name: "force", Usage: "format even over a strata volume that holds extents"}),
						Action: func(ctx context.Context, cmd *cli.Command) error {
							bdf, nsid, err := bdfNSID(cmd, "volume format", 2)
							if err != nil {
								return err
							}
							tb, err := parseBytes(cmd.String("table-size"))
							if err != nil {
								return usagef("--table-size: %v", err)
							}
							v, err := dial(cmd).FormatVolume(ctx, api.FormatRequest{BDF: bdf, NSID: nsid, Label: cmd.String("label"),
								TableBytes: tb, Force: cmd.Bool("force")})
							if err != nil {
								return deviceErr(err)
							}
							if cmd.Bool("json") {
								return printJSON(v)
							}
							fmt.Printf("formatted %s namespace %d: %s, %s free\n", v.BDF, v.NSID, human(v.Bytes), human(v.FreeBytes))
							return nil
						},
					},
				},
			},
			{
				Name:  "pool",
				Usage: "prefab pools on strata volumes",
				Commands: []*cli.Command{
					{
						Name:      "write",
						Usage:     "store a prefab pool on a namespace's volume as an extent, verified after writing",
						ArgsUsage: "BDF NSID POOLFILE",
						Description: "POOLFILE is read by stratad and must lie in one of its model directories (relative paths\n" +
							"are taken relative to them, as for `strata load`). Make pools with `strata model prefab`.",
						Flags: daemonFlags(jsonFlag,
							&cli.StringFlag{Name: "name", Usage: "extent name (default: the file's base name)"}),
						Action: func(ctx context.Context, cmd *cli.Command) error {
							bdf, nsid, err := bdfNSID(cmd, "pool write", 3)
							if err != nil {
								return err
							}
							p, err := dial(cmd).WritePool(ctx, api.PoolWriteRequest{BDF: bdf, NSID: nsid,
								Path: cmd.Args().Get(2), Name: cmd.String("name")})
							if err != nil {
								return deviceErr(err)
							}
							if cmd.Bool("json") {
								return printJSON(p)
							}
							e := p.Extent
							fmt.Printf("wrote %s to %s namespace %d as %q: %s at byte %d, xxh3 %s, verified; %.2fs (%.3f GB/s)\n",
								p.Path, bdf, nsid, e.Name, human(e.Length), e.Offset, e.XXH3, p.Seconds, p.GBps)
							return nil
						},
					},
				},
			},
		},
	}
}

// deviceErr maps a client error to an exit code: as clientErr, and a
// controller busy with another operation exits like a full queue.
func deviceErr(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code != nil && *ae.Code == "device_busy" {
		return codedError{err, exitBusy}
	}
	return clientErr(err)
}

func oneBDF(cmd *cli.Command, name string) (string, error) {
	if cmd.NArg() != 1 {
		return "", usagef("%s needs exactly one BDF (PCI address, e.g. 0000:01:00.0)", name)
	}
	return cmd.Args().First(), nil
}

// bdfNSID reads BDF NSID [more] arguments; n is how many there must be.
func bdfNSID(cmd *cli.Command, name string, n int) (string, int, error) {
	if cmd.NArg() != n {
		return "", 0, usagef("%s needs %s", name, cmd.ArgsUsage)
	}
	nsid, err := strconv.Atoi(cmd.Args().Get(1))
	if err != nil || nsid <= 0 {
		return "", 0, usagef("%s: NSID %q is not a namespace ID (1, 2, …)", name, cmd.Args().Get(1))
	}
	return cmd.Args().First(), nsid, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func devicesList(ctx context.Context, cmd *cli.Command) error {
	l, err := dial(cmd).Devices(ctx)
	if err != nil {
		return deviceErr(err)
	}
	if cmd.Bool("json") {
		return printJSON(l)
	}
	printDevices(l)
	return nil
}

func printDevices(l api.DeviceList) {
	v := l.VFIO
	switch {
	case v.Available && v.IOMMUFD:
		fmt.Println("VFIO: available (type1 and iommufd)")
	case v.Available:
		fmt.Println("VFIO: available (type1)")
	default:
		fmt.Printf("VFIO: unavailable, controllers cannot be bound (%s)\n", strings.Join(v.Notes, "; "))
	}
	if len(l.Controllers) == 0 {
		fmt.Println("no NVMe controllers")
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BDF\tDRIVER\tGROUP\tHELD\tMODEL\tSERIAL\tNAMESPACES")
	for _, c := range l.Controllers {
		group, held := strconv.Itoa(c.IOMMUGroup), "no"
		if c.IOMMUGroup < 0 {
			group = "none"
		}
		if c.Held {
			held = "yes"
		}
		var ns []string
		for _, n := range c.Namespaces {
			s := fmt.Sprintf("%d:%s", n.NSID, human(n.Bytes))
			if n.Volume != nil {
				s += fmt.Sprintf("[vol %d ext]", n.Volume.Extents)
			}
			ns = append(ns, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.BDF, orDash(c.Driver), group, held, orDash(c.Model), orDash(c.Serial), orDash(strings.Join(ns, " ")))
	}
	tw.Flush()
	for _, c := range l.Controllers {
		fmt.Printf("%s: %s\n", c.BDF, c.Note)
		for _, u := range c.Users {
			fmt.Printf("  %s\n", u)
		}
	}
}

func namespaceText(ns api.Namespace) string {
	s := fmt.Sprintf("namespace %d: %s, %d-byte blocks", ns.NSID, human(ns.Bytes), ns.BlockSize)
	if v := ns.Volume; v != nil {
		s += fmt.Sprintf("; strata volume %q with %d extents, %s free", v.Label, v.Extents, human(v.FreeBytes))
	} else {
		s += "; no strata volume"
	}
	return s
}

func printControllerStats(c api.ControllerStats) {
	fmt.Printf("%s  %s  held %s\n", c.BDF, orDash(c.Model), time.Since(c.HeldSince).Round(time.Second))
	fmt.Printf("  reads %d (%s)  writes %d (%s)  errors %d  timeouts %d  aborts %d  resets %d\n",
		c.Reads, human(int64(c.ReadBytes)), c.Writes, human(int64(c.WriteBytes)), c.Errors, c.Timeouts, c.Aborts, c.Resets)
	r := func(x api.Rates) string {
		return fmt.Sprintf("read %.3f GB/s (%.0f IOPS), write %.3f GB/s (%.0f IOPS)", x.ReadGBps, x.ReadIOPS, x.WriteGBps, x.WriteIOPS)
	}
	fmt.Printf("  last %.1fs: %s\n  average:   %s\n", c.Interval.Seconds, r(c.Interval), r(c.Average))
	var qs []string
	for _, q := range c.Queues {
		qs = append(qs, fmt.Sprintf("%d: %d/%d", q.ID, q.Inflight, q.Depth-1))
	}
	fmt.Printf("  queues (in flight/slots): %s\n", strings.Join(qs, "  "))
	if c.DMAMappings > 0 {
		fmt.Printf("  DMA: %d mappings, %s in the controller's IOMMU domain\n", c.DMAMappings, human(int64(c.DMABytes)))
	}
}

func printVolume(v api.VolumeInfo) {
	fmt.Printf("%s namespace %d: strata volume %q (version %d, generation %d), %s, %d-byte blocks, %s free\n",
		v.BDF, v.NSID, v.Label, v.Version, v.Generation, human(v.Bytes), v.BlockSize, human(v.FreeBytes))
	if len(v.Extents) == 0 {
		fmt.Println("no extents")
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOFFSET\tLENGTH\tXXH3\tCREATED")
	for _, e := range v.Extents {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", e.Name, e.Offset, human(e.Length), e.XXH3, e.Created.Local().Format(time.DateTime))
	}
	tw.Flush()
}
