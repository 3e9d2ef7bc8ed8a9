package main

import (
	"slices"
	"testing"

	"github.com/strata-llm/strata/daemon/openai"
)

// TestForgetOldest: the oldest exchange after the system message goes
// (the user's message and every reply up to the next one), until none is
// left.
func TestForgetOldest(t *testing.T) {
	t.Parallel()
	m := func(role, text string) openai.ChatMessage {
		return openai.ChatMessage{Role: role, Content: openai.Content(text)}
	}
	s := &chatSession{history: []openai.ChatMessage{
		m("system", "s"), m("user", "u1"), m("assistant", "a1"), m("user", "u2"), m("assistant", "a2"),
	}}
	texts := func() []string {
		var out []string
		for _, h := range s.history {
			out = append(out, string(h.Content))
		}
		return out
	}
	for _, want := range [][]string{{"s", "u2", "a2"}, {"s"}} {
		if !s.forgetOldest() {
			t.Fatal("nothing forgotten")
		}
		if got := texts(); !slices.Equal(got, want) {
			t.Fatalf("history %v, want %v", got, want)
		}
	}
	if s.forgetOldest() {
		t.Fatal("forgot the system message")
	}
}
