package stream

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/rawstore"
)

// TestStage1RunAhead: stage 1 alone reads the tier-C layers in order, at
// most k ahead of the staging buffers handed back, and counts what it
// read.
func TestStage1RunAhead(t *testing.T) {
	t.Parallel()
	store, path := rawstore.New(t, 8)
	fs, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	tiers, _ := tier.MixTiers("all-C", 8)
	for _, k := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			p, err := New(Options{Store: store, Tiers: tiers, Depth: k, Source: fs, SlotsOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			ps := &pass{ctx: ctx, cancel: cancel, fetched: make([]chan staged, 8), freeStaging: make(chan int, k)}
			for l := range ps.fetched {
				ps.fetched[l] = make(chan staged, 1)
			}
			for s := range k {
				ps.freeStaging <- s
			}
			ps.wg.Add(1)
			go p.stage1(ps)
			for l := range 8 {
				g := <-ps.fetched[l]
				if g.err != nil {
					t.Fatal(g.err)
				}
				if !bytes.Equal(p.staging[g.s].Bytes()[:store.Ext[l].Length], store.Data[l]) {
					t.Fatalf("layer %d: wrong bytes in staging buffer %d", l, g.s)
				}
				// With the buffer still held, no more than k-1 later
				// layers can have been read.
				time.Sleep(time.Millisecond)
				ahead := 0
				for _, ch := range ps.fetched[l+1:] {
					ahead += len(ch)
				}
				if ahead > k-1 {
					t.Fatalf("%d layers read ahead of layer %d with its buffer held", ahead, l)
				}
				ps.freeStaging <- g.s
			}
			cancel()
			ps.wg.Wait()
			if ps.read.Layers != 8 || ps.read.Bytes == 0 {
				t.Fatalf("counted %d layers, %d bytes", ps.read.Layers, ps.read.Bytes)
			}
		})
	}
}
