package hw

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// Staging is storage that can read into staging memory it allocates
// itself: the userspace NVMe driver needs buffers mapped into its
// controller's IOMMU domain (package internal/bench/nvmebench implements it).
type Staging interface {
	// Name identifies the source ("0000:01:00.0/nsid 1").
	Name() string
	// Stager allocates slots × chunk bytes of staging memory (not Go heap
	// memory: the GPU registers it as pinned) and returns a stager reading
	// into it, the memory, and its release.
	Stager(slots, chunk int) (st bench.Stager, mem []byte, release func() error, err error)
}

// E2EOptions say which routes to look at.
type E2EOptions struct {
	// File, when set, is read for the file → pinned → GPU route.
	File string
	// FileDepth is the number of O_DIRECT reads in flight per chunk
	// (default 8).
	FileDepth int
	// NVMe, when set, is read for the NVMe → pinned → GPU route.
	NVMe Staging
	// GPU is the CUDA ordinal.
	GPU   int
	Route bench.RouteOptions
	// Verdict is `strata setup check`'s route verdict for this host; nil
	// when it could not be had (VerdictErr says why).
	Verdict    *bench.HostVerdict
	VerdictErr error
	// Where runs the bench, "local" or "stratad": it words the advice for
	// routes that need the other side.
	Where string
	Log   hclog.Logger
}

// E2E reports each storage → GPU route: whether it exists here and why
// (not), from the setup verdict and the GPU's presence, and measures those
// that can run now. Nothing is measured without a GPU: such routes are
// listed unmeasured with the reason ("CUDA unavailable: …").
func E2E(ctx context.Context, o E2EOptions) (*bench.E2EResult, error) {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	ro := o.Route
	if ro.Chunk <= 0 {
		ro.Chunk = 4 << 20
	}
	if ro.Slots <= 0 {
		ro.Slots = 2
	}
	if o.FileDepth <= 0 {
		o.FileDepth = 8
	}
	res := &bench.E2EResult{Via: o.Where, Routes: []bench.Route{}}
	v := o.Verdict
	if v != nil {
		res.HostRoute = v.Kind + ": " + v.Why
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("no setup-check verdict for this host (%v): route reasons below are partial", o.VerdictErr))
		v = &bench.HostVerdict{}
	}
	gpu, gerr := OpenGPU(o.GPU)
	if gerr == nil {
		defer gpu.Close()
		res.GPU = gpu.Name()
	} else {
		res.Notes = append(res.Notes, "no route measured: "+gerr.Error())
	}
	unmeasured := func(r *bench.Route) bool {
		if gerr != nil {
			r.Reason = "not measured: " + gerr.Error()
			return true
		}
		return false
	}

	// file → pinned → GPU
	if o.File == "" {
		res.Routes = append(res.Routes, bench.Route{Kind: bench.RouteFilePinned, Available: gerr == nil,
			Reason: "no file named: give a FILE (a pool on the storage to measure) to measure this route"})
	} else {
		r := bench.Route{Kind: bench.RouteFilePinned, Source: o.File}
		src, err := stream.OpenFile(o.File, stream.FileOptions{ChunkBytes: max(ro.Chunk/o.FileDepth, tier.PageSize),
			QueueDepth: o.FileDepth, Logger: o.Log})
		if err != nil {
			r.Reason = "unavailable: " + err.Error()
		} else {
			r.Available = gerr == nil
			if !src.Direct() {
				r.Facts = append(r.Facts, "the file system refuses O_DIRECT: reads come from the page cache")
			}
			if !unmeasured(&r) {
				err = measureFile(ctx, gpu, src, ro, &r)
			}
			src.Close()
			if err != nil {
				res.Routes = append(res.Routes, r)
				return res, fmt.Errorf("%s: %w", r.Kind, err)
			}
		}
		res.Routes = append(res.Routes, r)
	}

	// nvme → pinned → GPU
	r := bench.Route{Kind: bench.RouteNVMePinned}
	switch {
	case o.NVMe != nil:
		r.Source, r.Available = o.NVMe.Name(), gerr == nil
		if !unmeasured(&r) {
			if err := measureStaging(ctx, gpu, o.NVMe, ro, &r); err != nil {
				res.Routes = append(res.Routes, r)
				return res, fmt.Errorf("%s: %w", r.Kind, err)
			}
		}
	case o.Where == "stratad":
		r.Reason = "no controller named: bind one to stratad (strata devices bind BDF) and bench nvme:BDF/NSID"
	default:
		r.Reason = "the userspace NVMe driver runs in stratad: bench nvme:BDF/NSID (or --daemon) with a controller it holds"
	}
	switch v.Kind {
	case "host-pinned", "peer-bar":
		r.Facts = append(r.Facts, "setup check: "+v.Why)
	case "file":
		r.Facts = append(r.Facts, "setup check: "+v.Why)
		r.Facts = append(r.Facts, v.Lost("host-pinned")...)
	}
	res.Routes = append(res.Routes, r)

	// nvme → GPU BAR
	bar := bench.Route{Kind: bench.RouteNVMeBAR}
	if v.Kind == "peer-bar" {
		bar.Available = true
		bar.Source = v.NVMe + " → " + v.GPU
		bar.Reason = "planned by setup check, but not measured: no p2p.PeerBAR target into GPU memory has passed its self-test in stratad (it does not map GPU memory through gdrdrv yet)"
	} else {
		why := v.Lost("peer-bar")
		if len(why) == 0 && v.Kind != "" {
			why = []string{"setup check picks the " + v.Kind + " route: " + v.Why}
		}
		if len(why) == 0 {
			why = []string{"unknown without a setup-check verdict"}
		}
		bar.Reason = "unavailable: " + strings.Join(why, "; ")
	}
	res.Routes = append(res.Routes, bar)
	return res, nil
}

func measureFile(ctx context.Context, gpu *GPU, src *stream.FileSource, ro bench.RouteOptions, r *bench.Route) error {
	mem, err := stream.AllocAligned(ro.Slots * ro.Chunk)
	if err != nil {
		return err
	}
	defer mem.Free()
	up, err := gpu.NewUploader(mem.Bytes(), ro.Slots, ro.Chunk)
	if err != nil {
		return err
	}
	st := &fileStager{src: src}
	for i := range ro.Slots {
		st.slots = append(st.slots, mem.Bytes()[i*ro.Chunk:(i+1)*ro.Chunk])
	}
	return errors.Join(bench.MeasureRoute(ctx, st, up, ro, r), up.Close())
}

func measureStaging(ctx context.Context, gpu *GPU, s Staging, ro bench.RouteOptions, r *bench.Route) error {
	st, mem, release, err := s.Stager(ro.Slots, ro.Chunk)
	if err != nil {
		return err
	}
	defer release()
	up, err := gpu.NewUploader(mem, ro.Slots, ro.Chunk)
	if err != nil {
		return err
	}
	return errors.Join(bench.MeasureRoute(ctx, st, up, ro, r), up.Close())
}
