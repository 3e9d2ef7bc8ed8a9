package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-llm/strata/daemon/api"
)

// printPlanDetail prints, under `strata status`'s tier table, the rest of
// a model's plan (layer map, depth, budgets, expected cost and the link
// bounding it) and, when layers stream, the pipeline's counters.
func printPlanDetail(w io.Writer, m api.ModelStatus) {
	p := m.Plan
	if p == nil {
		return
	}
	fmt.Fprintf(w, "  layers: %s\n", layerMap(p.Layers))
	dev := fmt.Sprintf("device %s of %s", human(p.DeviceBytes), human(p.DeviceBudgetBytes))
	if p.Shared {
		if p.HostBytes > 0 {
			dev = fmt.Sprintf("device %s + tier-C staging %s of %s", human(p.DeviceBytes), human(p.HostBytes), human(p.DeviceBudgetBytes))
		}
		dev += " (device memory is host memory)"
	} else {
		dev += fmt.Sprintf(", host %s of %s", human(p.HostBytes), human(p.HostBudgetBytes))
	}
	fmt.Fprintf(w, "  plan: depth %d (slots of %s), %s\n", p.Depth, human(p.SlotBytes), dev)
	fmt.Fprintf(w, "  expected: %s per pass, %.3g tokens/s at batch %d, bound by %s (storage %s, h2d %s, compute %s per pass",
		secs(p.PassSeconds), p.TokensPerSecond, p.Batch, p.Bound,
		secs(p.LinkSeconds.Storage), secs(p.LinkSeconds.HostToDevice), secs(p.LinkSeconds.Compute))
	if p.StallSeconds > 0 {
		fmt.Fprintf(w, "; %s latency stall", secs(p.StallSeconds))
	}
	fmt.Fprintln(w, ")")
	if len(p.LinkNotes) > 0 {
		fmt.Fprintf(w, "  links: %s\n", strings.Join(p.LinkNotes, "; "))
	}
	if x := m.Experts; x != nil {
		fmt.Fprintf(w, "  experts: %d of %d resident (%s), %s on storage, %d read buffers; uses %d resident, %d buffered, %d read ahead (of %d reads ahead), %d read (%s in all), hit rate %.2f, %d promoted (of %d reads to promote), %d demoted",
			x.Resident, x.Experts, human(x.ResidentBytes), human(x.StorageBytes), x.ReadBuffers,
			x.UsesResident, x.UsesBuffered, x.UsesPrefetched, x.ReadsAhead, x.UsesRead, human(x.ReadBytes), x.HitRate, x.Promoted, x.PromoteReads, x.Demoted)
		if x.ReadsFailed > 0 {
			fmt.Fprintf(w, ", %d reads failed", x.ReadsFailed)
		}
		fmt.Fprintln(w)
		if x.OnDevice > 0 || x.UsesDevice > 0 {
			fmt.Fprintf(w, "  experts in device memory: %d (%s; %d whole layers, which need no host); picks of them %d, of the others %d, device hit rate %.2f",
				x.OnDevice, human(x.DeviceBytes), x.DeviceWholeLayers, x.UsesDevice, x.UsesCPU, x.DeviceHitRate)
			if x.StreamedPicks > 0 {
				fmt.Fprintf(w, "; %d of the others sent over PCIe and computed on the GPU beside the CPU", x.StreamedPicks)
			}
			if x.MappedPicks > 0 {
				fmt.Fprintf(w, "; %d of the others pulled over PCIe by the GPU alone", x.MappedPicks)
			}
			if x.MappedWay != "" {
				fmt.Fprintf(w, "; at one token the others go %s", x.MappedWay)
			}
			if x.DeviceMoves > 0 {
				fmt.Fprintf(w, "; %d moved in while serving", x.DeviceMoves)
			}
			fmt.Fprintln(w)
		}
	}
	pl := m.Pipeline
	if pl == nil {
		return
	}
	fmt.Fprintf(w, "  pipeline: %d passes (%d failed), overlap %.2f, compute fed %.0f%% of the time\n",
		pl.Passes, pl.Failed, pl.Overlap, 100*pl.ComputeUtil)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STAGE\tBYTES\tPER PASS\tGB/S\tBUSY\tSTALL\t")
	for _, s := range []struct {
		name string
		s    api.StageStatus
	}{{"read (storage)", pl.Read}, {"copy (to device)", pl.Copy}, {"compute", pl.Compute}} {
		per := int64(0)
		if pl.Passes > 0 {
			per = s.s.Bytes / pl.Passes
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%.2f\t%s\t%s\t\n", s.name, human(s.s.Bytes), human(per), s.s.GBps, secs(s.s.BusySeconds), secs(s.s.StallSeconds))
	}
	tw.Flush()
}

// layerMap compresses per-layer tiers into runs: "0-3 A, 4-31 C".
func layerMap(tiers []string) string {
	var parts []string
	for i := 0; i < len(tiers); {
		j := i
		for j+1 < len(tiers) && tiers[j+1] == tiers[i] {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprintf("%d %s", i, tiers[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d %s", i, j, tiers[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// secs formats seconds as a rounded duration ("-" for zero).
func secs(s float64) string {
	if s == 0 {
		return "-"
	}
	return dur(time.Duration(s * float64(time.Second)))
}
