package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// slotted is a backend with a fixed number of KV-cache slots, as a GPU
// has: NewSequence fails when every slot is held, and a slot comes back
// only when its sequence is closed. It runs the passes on the wrapped
// CPU backend.
type slotted struct {
	engine.Backend
	slots int

	mu         sync.Mutex
	open, peak int
	closes     int
}

type slottedSeq struct {
	engine.Sequence
	b      *slotted
	closed bool
}

func (b *slotted) MaxSeqs() int { return b.slots }

func (b *slotted) NewSequence(maxCtx int) (engine.Sequence, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == b.slots {
		return nil, fmt.Errorf("all %d slots held", b.slots)
	}
	s, err := b.Backend.NewSequence(maxCtx)
	if err != nil {
		return nil, err
	}
	b.open++
	b.peak = max(b.peak, b.open)
	return &slottedSeq{Sequence: s, b: b}, nil
}

func (s *slottedSeq) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.b.open--
		s.b.closes++
	}
	s.Sequence.Close()
}

func (b *slotted) Forward(ctx context.Context, batch []model.Step) error {
	inner := make([]model.Step, len(batch))
	for i, st := range batch {
		s := st.Seq.(*slottedSeq)
		if s.closed {
			return errors.New("pass over a closed sequence")
		}
		inner[i] = model.Step{Seq: s.Sequence, Tokens: st.Tokens, Logits: st.Logits, AllLogits: st.AllLogits}
	}
	err := b.Backend.Forward(ctx, inner)
	for i := range batch {
		batch[i].Logits = inner[i].Logits
	}
	return err
}

// TestSlotsReturned runs more requests than the backend has slots, ending
// every way a request can end (length, stop string, cancellation, and the
// scheduler closing): the batch is capped at the slots, every slot is
// given back, and every request that was not cut short produces exactly
// what it produces alone.
func TestSlotsReturned(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	b := &slotted{Backend: e.Backend(), slots: 2}
	rec := &recorder{}
	s := New(b, e.Tok, Config{MaxBatch: 16, Observer: rec})
	if st := s.Stats(); st.MaxBatch != 2 {
		t.Fatalf("max batch %d, want the backend's 2 slots", st.MaxBatch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const n = 7
	type sub struct {
		h      *Handle
		cancel context.CancelFunc
		want   string
	}
	var subs []sub
	for i := range n {
		prompt := e.Tok.Encode(fmt.Sprintf("slot request %d", i), true, false)
		r := Request{Prompt: prompt, MaxTokens: 3 + i, Sample: sample.Greedy()}
		res, err := Generate(context.Background(), e.Backend(), e.Tok, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(context.Background())
		h, err := s.Submit(rctx, r)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub{h: h, cancel: rcancel, want: res.Text})
	}
	// Every request is queued before the scheduler starts, so the first
	// passes fill both slots whatever the machine's speed (the peak check
	// below must not depend on timing).
	go s.Run(ctx)
	subs[3].cancel() // cancelled while queued or running
	for i, sb := range subs {
		text, last, _ := collect(sb.h)
		switch {
		case i == 3:
			if last.Err == nil && text != sb.want {
				t.Errorf("request %d: %q, want %q", i, text, sb.want)
			}
		case last.Err != nil:
			t.Errorf("request %d: %v", i, last.Err)
		case text != sb.want:
			t.Errorf("request %d: %q, want %q alone", i, text, sb.want)
		}
		sb.cancel()
	}
	// Close while one request holds a slot: it is given back too.
	h, err := s.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 200, Sample: sample.Greedy()})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Events // it has a slot once a token came out
	s.Close(errors.New("test over"))
	for range h.Events {
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open != 0 || b.peak != 2 {
		t.Fatalf("%d slots still held after every request ended (peak %d, %d closes)", b.open, b.peak, b.closes)
	}
	if rec.maxSeqs > 2 {
		t.Fatalf("a pass carried %d sequences over 2 slots", rec.maxSeqs)
	}
}

// TestNoSlotFailsOneRequest: when the backend refuses a sequence (its
// slots are taken by someone else), that request fails with the reason and
// the scheduler goes on serving.
func TestNoSlotFailsOneRequest(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	b := &slotted{Backend: e.Backend(), slots: 1}
	held, err := b.NewSequence(8) // someone else holds the only slot
	if err != nil {
		t.Fatal(err)
	}
	s := New(b, e.Tok, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	defer s.Close(errors.New("test over"))
	h, err := s.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 2, Sample: sample.Greedy()})
	if err != nil {
		t.Fatal(err)
	}
	_, last, _ := collect(h)
	if last.Err == nil {
		t.Fatal("a request without a slot succeeded")
	}
	t.Logf("refused: %v", last.Err)
	held.Close()
	h, err = s.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 2, Sample: sample.Greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if _, last, _ := collect(h); last.Err != nil || last.Finish == "" {
		t.Fatalf("after the slot came back: %+v", last)
	}
}
