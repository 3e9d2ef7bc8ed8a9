package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/internal/synth"
)

// TestOpenCancelled: a cancelled context stops every way of opening a
// model with an error wrapping context.Canceled, whether it was cancelled
// before the open or while the load measured its links.
func TestOpenCancelled(t *testing.T) {
	t.Parallel()
	pool, gg := stackedPool(t, "llama", "q8_0", 1, 2)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// midLoad opens the pool streamed, cancelling the load from inside the
	// storage measurement: after the pool is open and before it is planned.
	midLoad := func(path string) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		links, _ := engine.NewFakeLinkCache(func(context.Context) { cancel() })
		e, err := engine.OpenWith(ctx, path, engine.Options{Backend: "cpu", Tiers: "all-C", HostBudget: 1 << 30, Context: 256, LinkCache: links})
		if err == nil {
			e.Close()
		}
		return err
	}
	open := func(f func(context.Context, string) (*engine.Engine, error)) func(string) error {
		return func(path string) error {
			e, err := f(cancelled, path)
			if err == nil {
				e.Close()
			}
			return err
		}
	}
	openWith := func(o engine.Options) func(string) error {
		return open(func(ctx context.Context, path string) (*engine.Engine, error) { return engine.OpenWith(ctx, path, o) })
	}
	// whileVerifying opens the pool resident with a context that is
	// cancelled after the open's first two checks: inside the extent
	// checks, before the first layer.
	whileVerifying := func(path string) error {
		e, err := engine.OpenPool(&cancelAfter{Context: context.Background(), checks: 2}, path)
		if err == nil {
			e.Close()
			return nil
		}
		if !strings.Contains(err.Error(), "verifying the pool at layer 0") {
			return fmt.Errorf("not stopped at the first extent: %w", err)
		}
		return err
	}
	for _, tc := range []struct {
		name string
		path string
		open func(string) error
	}{
		{"Open gguf", gg, open(engine.Open)},
		{"Open pool", pool, open(engine.Open)},
		{"OpenPool", pool, open(engine.OpenPool)},
		{"OpenWith gguf", gg, openWith(engine.Options{Backend: "cpu", Links: defaultLinks()})},
		{"OpenWith auto", gg, openWith(engine.Options{Links: defaultLinks()})},
		{"OpenWith pool streamed", pool, openWith(engine.Options{Backend: "cpu", Tiers: "all-C", HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})},
		{"OpenWith cancelled while measuring links", pool, midLoad},
		{"OpenPool cancelled while verifying extents", pool, whileVerifying},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.open(tc.path); !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		})
	}
}

// cancelAfter is a context whose Err reports cancellation after checks
// calls: it stands for a cancellation arriving in the middle of a load.
type cancelAfter struct {
	context.Context
	checks int32
	n      atomic.Int32
}

func (c *cancelAfter) Err() error {
	if c.n.Add(1) > c.checks {
		return context.Canceled
	}
	return nil
}

// TestLinksMeasuredOnce: two loads that stream, sharing one LinkCache,
// measure each link once, and the second plan uses the first's figures.
func TestLinksMeasuredOnce(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, "llama", "q8_0", 1, 2)
	links, counts := engine.NewFakeLinkCache(nil)
	for i := range 2 {
		e, err := engine.OpenWith(context.Background(), pool, engine.Options{
			Backend: "cpu", Tiers: "all-C", HostBudget: 1 << 30, Context: 256, LinkCache: links,
		})
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		l := e.Plan().Links
		e.Close()
		if l.StorageToHost != 2e9 || l.HostToDevice != 20e9 || l.Compute != 40e9 {
			t.Fatalf("load %d planned with %+v, not the cached measurements", i, l)
		}
	}
	got := counts()
	for _, link := range []string{"storage", "memmove", "compute"} {
		if got[link] != 1 {
			t.Errorf("%s measured %d times over two loads, want once (%v)", link, got[link], got)
		}
	}
	// A resident load needs no link at all.
	gg := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := synth.Write(gg, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.OpenWith(context.Background(), gg, engine.Options{Backend: "cpu", LinkCache: links})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if after := counts(); len(after) != len(got) || after["storage"] != 1 {
		t.Errorf("a resident load measured links: %v", after)
	}
}
