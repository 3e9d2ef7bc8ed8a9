package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// tinyGGUF writes a tiny synthetic llama.
func tinyGGUF(t *testing.T, typ string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-"+typ+".gguf")
	if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: typ, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return path
}

// logSink collects an engine's log lines.
type logSink struct{ strings.Builder }

func (l *logSink) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &l.Builder})
}

// TestBackendChoice covers the backend choice off the GPU: auto falls back
// to the CPU and says why (in BackendInfo and in an info-level log line),
// cuda fails with "CUDA unavailable: …", cpu never opens the device, and
// any CUDA failure that is not "unavailable" also leaves auto on the CPU
// with its reason. The CPU path is the same computation whichever way it
// was chosen: the tokens equal engine.Open's.
func TestBackendChoice(t *testing.T) {
	t.Parallel()
	path := tinyGGUF(t, "q8_0")
	want, _ := residentTokens(t, path, 12)
	for _, tc := range []struct {
		name      string
		backend   string
		open      func() (*cudadrv.Device, error)
		wantErr   string // substring; "" means success on the CPU
		reason    string // substring of BackendInfo.Reason
		log       string // substring of the log
		opened    bool   // the device was tried
		requested string
	}{
		{name: "auto without a GPU", backend: "", open: unavailable, reason: "CUDA unavailable: test: no driver",
			log: "CUDA unavailable; running on the CPU backend", opened: true, requested: engine.BackendAuto},
		{name: "explicit auto", backend: "AUTO", open: unavailable, reason: "CUDA unavailable", opened: true, requested: engine.BackendAuto},
		{name: "cuda without a GPU", backend: "cuda", open: unavailable, wantErr: "backend cuda: CUDA unavailable: test: no driver", opened: true},
		{name: "cpu never opens the GPU", backend: "cpu", open: unavailable, opened: false, requested: engine.BackendCPU},
		{name: "auto with a failing GPU", backend: "auto", open: broken, reason: "CUDA backend failed: open CUDA device 0: test: context",
			log: "could not take the model", opened: true, requested: engine.BackendAuto},
		{name: "cuda with a failing GPU", backend: "cuda", open: broken, wantErr: "test: context", opened: true},
		{name: "unknown backend", backend: "gpu", open: unavailable, wantErr: `unknown backend "gpu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opened := false
			var logs logSink
			o := engine.WithOpenDevice(engine.Options{Backend: tc.backend, Links: defaultLinks(), Logger: logs.logger()},
				func() (*cudadrv.Device, error) { opened = true; return tc.open() })
			e, err := engine.OpenWith(context.Background(), path, o)
			if opened != tc.opened {
				t.Errorf("device opened: %v, want %v", opened, tc.opened)
			}
			if tc.wantErr != "" {
				if err == nil {
					e.Close()
					t.Fatalf("opened; want an error with %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q, want %q", err, tc.wantErr)
				}
				if tc.open != nil && strings.Contains(tc.wantErr, "CUDA unavailable") != errors.Is(err, engine.ErrCUDAUnavailable) {
					t.Fatalf("errors.Is(%v, ErrCUDAUnavailable) = %v", err, errors.Is(err, engine.ErrCUDAUnavailable))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			bi := e.BackendInfo()
			if bi.Name != engine.BackendCPU || e.Backend().Name() != engine.BackendCPU || bi.Requested != tc.requested {
				t.Fatalf("backend %+v (%s), want cpu requested %s", bi, e.Backend().Name(), tc.requested)
			}
			if tc.reason == "" && bi.Reason != "" || !strings.Contains(bi.Reason, tc.reason) {
				t.Fatalf("reason %q, want %q", bi.Reason, tc.reason)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Fatalf("log %q lacks %q", logs.String(), tc.log)
			}
			if !strings.Contains(bi.String(), "cpu") {
				t.Fatalf("String() = %q", bi.String())
			}
			got, _, err := greedy(t, e, 12)
			if err != nil {
				t.Fatal(err)
			}
			if !sameIDs(got, want) {
				t.Fatalf("tokens %v, want engine.Open's %v", got, want)
			}
		})
	}
}

func unavailable() (*cudadrv.Device, error) {
	return nil, fmt.Errorf("%w: test: no driver", cudadrv.ErrUnavailable)
}

func broken() (*cudadrv.Device, error) {
	return nil, errors.New("open CUDA device 0: test: context retain failed")
}

// TestBackendRealDriver runs the choice against this machine's driver, as
// strata run and stratad do: off the GPU (CI) auto names the real reason
// and cuda fails; on a GPU machine the model runs there and its greedy
// tokens match the CPU reference.
// Sequential: it opens GPU 0 where there is one.
func TestBackendRealDriver(t *testing.T) {
	path := tinyGGUF(t, "f32")
	e, err := engine.OpenWith(context.Background(), path, engine.Options{Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	bi := e.BackendInfo()
	t.Logf("backend: %s", bi)
	if bi.Name == engine.BackendCPU {
		if !strings.HasPrefix(bi.Reason, "CUDA unavailable: ") && !strings.HasPrefix(bi.Reason, "CUDA backend failed: ") {
			t.Fatalf("auto fell back to the CPU with reason %q", bi.Reason)
		}
		_, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: "cuda", Links: defaultLinks()})
		if err == nil || !strings.Contains(err.Error(), "CUDA") {
			t.Fatalf("backend cuda without a usable GPU: %v", err)
		}
		return
	}
	if bi.Device == "" || bi.DeviceMemory <= 0 || bi.WeightBytes <= 0 || bi.Slots != 1 {
		t.Fatalf("GPU backend info %+v", bi)
	}
	want, _ := residentTokens(t, path, 32)
	got, _, err := greedy(t, e, 32)
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(got, want) {
		t.Fatalf("GPU tokens %v, CPU %v", got, want)
	}
	// Half the layers on tier B: streamed from pinned memory every pass.
	s, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: "cuda", Tiers: "A,B", Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Streamed() || s.BackendInfo().StreamedBytes <= 0 {
		t.Fatalf("forced A,B on the GPU: streamed %v, %+v", s.Streamed(), s.BackendInfo())
	}
	if got, _, err = greedy(t, s, 32); err != nil || !sameIDs(got, want) {
		t.Fatalf("streamed GPU tokens %v (%v), CPU %v", got, err, want)
	}
}

// TestForwardChecksSequences: a pass refuses a closed sequence and one
// from another engine, before anything changes.
func TestForwardChecksSequences(t *testing.T) {
	t.Parallel()
	path := tinyGGUF(t, "q8_0")
	a, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: "cpu", Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := engine.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	sa, _ := a.NewSequence(16)
	sb, _ := b.NewSequence(16)
	if err := a.Forward(ctx, []model.Step{{Seq: sa, Tokens: []int32{1}}, {Seq: sb, Tokens: []int32{1}}}); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Fatalf("foreign sequence: %v", err)
	}
	if sa.Pos() != 0 {
		t.Fatalf("a refused pass moved the sequence to %d", sa.Pos())
	}
	st := []model.Step{{Seq: sa, Tokens: []int32{1, 2}}}
	if err := a.Forward(ctx, st); err != nil || sa.Pos() != 2 || len(st[0].Logits) != 1 || len(st[0].Logits[0]) != a.Model.Config.Vocab {
		t.Fatalf("pass: %v, pos %d, %d logit rows", err, sa.Pos(), len(st[0].Logits))
	}
	sa.Close()
	sa.Close()
	if err := a.Forward(ctx, []model.Step{{Seq: sa, Tokens: []int32{3}}}); !errors.Is(err, engine.ErrSequenceClosed) {
		t.Fatalf("closed sequence: %v", err)
	}
}

func TestParseBackend(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "auto", "auto": "auto", " CPU ": "cpu", "cuda": "cuda", "Cuda": "cuda", "gpu": "", "cpu,cuda": ""} {
		got, err := engine.ParseBackend(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("ParseBackend(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
