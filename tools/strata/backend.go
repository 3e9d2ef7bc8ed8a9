package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/daemon/api"
)

// The strata binary and the CUDA binding. The style guide keeps the CUDA
// binding and the NVMe driver out of the unprivileged client, and the
// commands that talk to stratad (daemon/client) link neither. `strata run`
// is the exception for CUDA: it is an offline tool that runs a model in
// this process, and to pick the GPU automatically it links engine/gpu
// and kernels/cudadrv — a purego binding, no cgo, that only dlopens
// libcuda.so.1 when run asks for a device, so the binary still builds with
// CGO_ENABLED=0 and runs on hosts without a driver. The NVMe driver and
// VFIO stay out of the binary altogether (deps_test.go checks both rules).

// backendFlag is `strata load --backend`: where the daemon runs the model.
var backendFlag = &cli.StringFlag{
	Name:  "backend",
	Usage: "where the daemon runs the model: auto (the GPU when CUDA is usable, else the CPU), cpu, or cuda (fail without a GPU); default: the daemon's --backend",
	Validator: func(s string) error {
		switch strings.ToLower(s) {
		case "", "auto", "cpu", "cuda":
			return nil
		}
		return fmt.Errorf("unknown backend %q: use auto, cpu or cuda", s)
	},
}

// describeBackend says in one line what runs a model: the GPU with its
// memory and what the model holds there, or the CPU and why.
func describeBackend(b api.BackendStatus) string {
	switch b.Name {
	case "cuda":
		s := fmt.Sprintf("cuda on %s (GPU %d, sm %s, %s, %s free at load); weights %s on the device",
			b.Device, b.Ordinal, b.ComputeCapability, human(b.DeviceMemoryBytes), human(b.DeviceFreeBytes), human(b.WeightBytes))
		if b.Kernels != "" {
			s += fmt.Sprintf(", kernels: %s", b.Kernels)
		}
		if b.StreamedBytesPerPass > 0 {
			s += fmt.Sprintf(", %s streamed per pass (tier B from pinned host memory, tier C from the pool through pinned staging)", human(b.StreamedBytesPerPass))
		}
		if b.Slots > 0 {
			s += fmt.Sprintf("; KV cache %s (%d sequences x %d positions)", human(b.KVBytes), b.Slots, b.MaxContext)
		}
		return s
	case "":
		return "unknown (the daemon did not say)"
	}
	switch {
	case b.Reason != "":
		return b.Name + " (" + b.Reason + ")"
	case b.Requested == b.Name:
		return b.Name + " (requested)"
	}
	return b.Name
}
