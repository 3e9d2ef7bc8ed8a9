package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/daemon/api"
)

func init() {
	registerCommand(modelsCommand)
	registerCommand(statusCommand)
	registerCommand(loadCommand)
	registerCommand(unloadCommand)
}

func modelsCommand() *cli.Command {
	return &cli.Command{
		Name:  "models",
		Usage: "list the models stratad serves",
		Flags: daemonFlags(jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() > 0 {
				return usagef("models takes no arguments")
			}
			l, err := dial(cmd).Models(ctx)
			if err != nil {
				return clientErr(err)
			}
			if cmd.Bool("json") {
				return printJSON(l)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tOWNED BY\tLOADED")
			for _, m := range l.Data {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", m.ID, m.OwnedBy, time.Unix(m.Created, 0).Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show stratad's models, tier plans, memory, queues and counters",
		Flags: daemonFlags(jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() > 0 {
				return usagef("status takes no arguments")
			}
			st, err := dial(cmd).Status(ctx)
			if err != nil {
				return clientErr(err)
			}
			if cmd.Bool("json") {
				return printJSON(st)
			}
			printStatus(st)
			return nil
		},
	}
}

func printStatus(st api.Status) {
	admin := "no"
	if st.Admin {
		admin = "yes"
	}
	pid := "" // shown to administrators only
	if st.PID != 0 {
		pid = fmt.Sprintf(", pid %d", st.PID)
	}
	fmt.Printf("stratad %s%s, up %s; you are %s (admin: %s)\n", st.Version, pid,
		(time.Duration(st.Uptime) * time.Second).String(), st.Peer, admin)
	printBlockIO(st.Block)
	if len(st.Models) == 0 {
		fmt.Println("no models loaded")
		return
	}
	for _, m := range st.Models {
		fmt.Printf("\nmodel %s (%s, %d layers, context %d, backend %s)\n", m.Name, m.Arch, m.Layers, m.Context, m.Backend)
		if m.Path != "" {
			fmt.Printf("  file %s\n", m.Path)
		}
		fmt.Printf("  backend: %s\n", describeBackend(m.BackendInfo))
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TIER\tLAYERS\tBYTES\tMOVED\t")
		if m.Plan == nil {
			fmt.Fprintf(tw, "  -\t%d\t%s\t0\t(%s)\n", m.Layers, human(m.Memory.WeightBytes), m.Memory.Location)
		} else {
			for _, t := range m.Plan.Tiers {
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", t.Tier, t.Layers, human(t.Bytes), human(int64(t.BytesMoved)), t.Description)
			}
		}
		tw.Flush()
		if m.PlanNote != "" {
			fmt.Printf("  note: %s\n", m.PlanNote)
		}
		printRoute(os.Stdout, m.TierCRoute)
		printPlanDetail(os.Stdout, m)
		b := []string{}
		if m.Budgets.VRAMBytes > 0 {
			b = append(b, "vram "+human(m.Budgets.VRAMBytes))
		}
		if m.Budgets.RAMBytes > 0 {
			b = append(b, "ram "+human(m.Budgets.RAMBytes))
		}
		if len(b) > 0 {
			fmt.Printf("  budgets: %s\n", strings.Join(b, ", "))
		}
		fmt.Printf("  memory: weights %s, kv cache %s\n", human(m.Memory.WeightBytes), human(m.Memory.KVBytes))
		fmt.Printf("  queue: %d active / %d max batch, %d waiting / %d max queue\n", m.Queue.Active, m.Queue.MaxBatch, m.Queue.Waiting, m.Queue.MaxQueue)
		c := m.Counters
		fmt.Printf("  counters: %d passes, %d prompt tokens, %d completion tokens, %d finished, %d cancelled, %d failed\n",
			c.Passes, c.PromptTokens, c.CompletionTokens, c.Finished, c.Cancelled, c.Failed)
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func loadCommand() *cli.Command {
	return &cli.Command{
		Name:      "load",
		Usage:     "load a model into stratad (needs root or the admin group; PATH must lie in one of the daemon's model directories, or name a pool on a strata volume of a bound controller: nvme://BDF/NSID/NAME)",
		ArgsUsage: "PATH | nvme://BDF/NSID/NAME",
		Flags: daemonFlags(jsonFlag,
			&cli.StringFlag{Name: "name", Usage: "model id (default: file name without extension)"},
			&cli.StringFlag{Name: "vram-budget", Usage: "device-memory budget, e.g. 20GiB (default: the GPU's free memory less a reserve; on the CPU backend none: device memory is host memory)"},
			&cli.StringFlag{Name: "ram-budget", Usage: "host-memory budget, e.g. 64GiB (default: MemAvailable minus a reserve); layers of a prefab pool that do not fit stream every pass"},
			&cli.IntFlag{Name: "max-batch", Usage: "sequences per pass (default: the daemon's)"},
			&cli.IntFlag{Name: "max-queue", Usage: "waiting requests before 429 (default: the daemon's)"},
			&cli.IntFlag{Name: "ctx", Usage: "per-sequence context the KV cache is planned for (default: the model's, at most 4096)"},
			&cli.IntFlag{Name: "depth", Usage: "streaming pipeline depth (0 = the planner chooses)"},
			&cli.StringFlag{Name: "tiers", Usage: "force the placement: all-A, all-B, all-C, mixed or A,C,B,... (tests and benchmarks)"},
			backendFlag,
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usagef("load needs exactly one PATH")
			}
			vram, err := parseBytes(cmd.String("vram-budget"))
			if err != nil {
				return usagef("--vram-budget: %v", err)
			}
			ram, err := parseBytes(cmd.String("ram-budget"))
			if err != nil {
				return usagef("--ram-budget: %v", err)
			}
			if cmd.Int("max-batch") < 0 || cmd.Int("max-queue") < 0 || cmd.Int("ctx") < 0 || cmd.Int("depth") < 0 {
				return usagef("--max-batch, --max-queue, --ctx and --depth must not be negative")
			}
			st, err := dial(cmd).Load(ctx, api.LoadRequest{Path: cmd.Args().First(), Name: cmd.String("name"),
				Budgets: api.Budgets{VRAMBytes: vram, RAMBytes: ram}, MaxBatch: int(cmd.Int("max-batch")), MaxQueue: int(cmd.Int("max-queue")),
				Context: int(cmd.Int("ctx")), Depth: int(cmd.Int("depth")), Tiers: cmd.String("tiers"), Backend: cmd.String("backend")})
			if err != nil {
				return clientErr(err)
			}
			if cmd.Bool("json") {
				return printJSON(st)
			}
			fmt.Printf("loaded %s from %s (%s, %d layers, %s)\n", st.Name, st.Path, st.Arch, st.Layers, human(st.Memory.WeightBytes))
			if st.PlanNote != "" {
				fmt.Printf("  %s\n", st.PlanNote)
			}
			printRoute(os.Stdout, st.TierCRoute)
			return nil
		},
	}
}

// printRoute prints how a model's tier-C layers are read and why the other
// routes were refused (nothing when no layer is on tier C).
func printRoute(w io.Writer, r *api.TierCRoute) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "  tier C route: %s", r.Route)
	if r.Via != "" {
		fmt.Fprintf(w, " (%s)", r.Via)
	}
	fmt.Fprintln(w)
	for _, k := range slices.Sorted(maps.Keys(r.Refused)) {
		fmt.Fprintf(w, "    %s refused: %s\n", k, r.Refused[k])
	}
}

func unloadCommand() *cli.Command {
	return &cli.Command{
		Name:      "unload",
		Usage:     "unload a model from stratad (needs root or the admin group); requests running on it end with an error",
		ArgsUsage: "NAME",
		Flags:     daemonFlags(jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usagef("unload needs exactly one model NAME")
			}
			u, err := dial(cmd).Unload(ctx, cmd.Args().First())
			if err != nil {
				return clientErr(err)
			}
			if cmd.Bool("json") {
				return printJSON(u)
			}
			fmt.Printf("unloaded %s (%d requests cut short)\n", u.Name, u.Cancelled)
			return nil
		},
	}
}

// printBlockIO shows the daemon's eBPF view of the disks over its last
// sampling interval.
func printBlockIO(b *api.BlockIO) {
	switch {
	case b == nil:
		return
	case !b.Enabled:
		fmt.Printf("block I/O: %s\n", b.Note)
		return
	case len(b.Devices) == 0:
		fmt.Println("block I/O: traced; no disk activity in the last interval")
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DISK\tREAD MB/s\tREAD IOPS\tREAD p50\tREAD p99\tWRITE MB/s\tERRORS\t")
	for _, d := range b.Devices {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.0f\t%s\t%s\t%.1f\t%d\t\n", d.Device, d.ReadMBps, d.ReadIOPS,
			time.Duration(d.ReadP50Nanos), time.Duration(d.ReadP99Nanos), d.WriteMBps, d.Errors)
	}
	fmt.Println("block I/O (eBPF, last interval):")
	tw.Flush()
}
