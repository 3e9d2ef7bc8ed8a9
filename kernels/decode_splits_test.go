package kernels

import "testing"

// TestDecodeSplits holds the split choice to the measured aims: two
// blocks a multiprocessor, eight for one token's span of 2048 keys or
// more, never fewer than 32 keys a split nor more than 64 splits.
func TestDecodeSplits(t *testing.T) {
	t.Parallel()
	at := Attention{Heads: 32, KVHeads: 4, HeadDim: 128}
	for _, c := range []struct {
		name            string
		sms, ntok, span int
		want            int
	}{
		{"one token, short span: 32 keys a split", 132, 1, 64, 2},
		{"one token, 1024 keys: 2 blocks/SM", 132, 1, 1024, 9},
		{"one token, 2048 keys: 8 blocks/SM", 132, 1, 2048, 33},
		{"one token, 4096 keys: 8 blocks/SM", 132, 1, 4096, 33},
		{"eight tokens fill the grid: 2 blocks/SM", 132, 8, 4096, 2},
		{"four tokens, 128 pairs under 132 SMs: long aim", 132, 4, 4096, 9},
		{"many SMs: at most 64 splits", 1024, 1, 1 << 16, 64},
		{"one key", 132, 1, 1, 1},
	} {
		if got := testKernels(c.sms).DecodeSplits(at, c.ntok, c.span); got != c.want {
			t.Errorf("%s: DecodeSplits(%d tokens, span %d) on %d SMs = %d, want %d", c.name, c.ntok, c.span, c.sms, got, c.want)
		}
	}
	off := tuned(testKernels(132), func(t *Tuning) { t.decodeLong.blocksPerSM = 0 })
	if got := off.DecodeSplits(at, 1, 4096); got != 9 {
		t.Errorf("without the long aim: %d splits, want 9", got)
	}
}
