package model

import "testing"

// TestSliding: which layers each architecture masks with its window:
// gemma2 the even ones, Gemma 3 five in six (not 5, 11, ...), every other
// architecture every layer, and none without a window.
func TestSliding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arch   string
		window int
		want   string // one letter a layer for layers 0..11: S sliding, G global
	}{
		{ArchGemma2, 8, "SGSGSGSGSGSG"},
		{ArchGemma3, 8, "SSSSSGSSSSSG"},
		{ArchLlama, 8, "SSSSSSSSSSSS"},
		{ArchPhi3, 8, "SSSSSSSSSSSS"},
		{ArchQwen2, 0, "GGGGGGGGGGGG"},
		{ArchGemma3, 0, "GGGGGGGGGGGG"},
	} {
		c := Config{Arch: tc.arch, SlidingWindow: tc.window}
		got := make([]byte, len(tc.want))
		for i := range got {
			got[i] = 'G'
			if c.Sliding(i) {
				got[i] = 'S'
			}
		}
		if string(got) != tc.want {
			t.Errorf("%s window %d: %s, want %s", tc.arch, tc.window, got, tc.want)
		}
	}
}
