package gpu

import (
	"reflect"
	"testing"

	"github.com/strata-llm/strata/engine/model"
)

// TestPlanPass checks, without a GPU, how a batch is laid out: attention
// launches (decode runs of single-token steps, one prefill per prompt) and
// logit rows.
func TestPlanPass(t *testing.T) {
	t.Parallel()
	m := &Model{}
	m.Config.Vocab = 10
	seq := func(slot, pos int) *Sequence { return &Sequence{m: m, slot: slot, pos: pos, max: 100, open: true} }
	a, b, c, d := seq(0, 5), seq(1, 0), seq(2, 9), seq(3, 2)
	for _, tc := range []struct {
		name  string
		batch []model.Step
		want  pass
	}{
		{
			name:  "decode",
			batch: []model.Step{{Seq: a, Tokens: []int32{1}}, {Seq: c, Tokens: []int32{2}}, {Seq: d, Tokens: []int32{3}}},
			want: pass{T: 3, R: 3, decode: true, maxPos: 9,
				attn: []attnRun{{t0: 0, n: 3, span: 10}},
				out:  []outRun{{t0: 0, n: 3, r0: 0}}},
		},
		{
			name:  "prompt",
			batch: []model.Step{{Seq: b, Tokens: []int32{1, 2, 3, 4}}},
			want: pass{T: 4, R: 1, maxPos: 3,
				attn: []attnRun{{t0: 0, n: 4, prefill: true, slot: 1, p0: 0}},
				out:  []outRun{{t0: 3, n: 1, r0: 0}}},
		},
		{
			name: "mixed",
			batch: []model.Step{{Seq: a, Tokens: []int32{1}}, {Seq: b, Tokens: []int32{1, 2, 3}, AllLogits: true},
				{Seq: c, Tokens: []int32{2}}, {Seq: d, Tokens: []int32{3}, AllLogits: true}},
			want: pass{T: 6, R: 6, maxPos: 9,
				attn: []attnRun{{t0: 0, n: 1, span: 6}, {t0: 1, n: 3, prefill: true, slot: 1}, {t0: 4, n: 2, span: 10}},
				out:  []outRun{{t0: 0, n: 6, r0: 0}}},
		},
		{
			name:  "prompts",
			batch: []model.Step{{Seq: b, Tokens: []int32{1, 2}}, {Seq: d, Tokens: []int32{1, 2, 3}}},
			want: pass{T: 5, R: 2, maxPos: 4,
				attn: []attnRun{{t0: 0, n: 2, prefill: true, slot: 1}, {t0: 2, n: 3, prefill: true, slot: 3, p0: 2}},
				out:  []outRun{{t0: 1, n: 1, r0: 0}, {t0: 4, n: 1, r0: 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := model.CheckBatch(tc.batch, m.Config.Vocab, m.own); err != nil {
				t.Fatal(err)
			}
			if got := planPass(tc.batch); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSpanBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ need, max, want int }{
		{1, 4096, 256}, {256, 4096, 256}, {257, 4096, 512}, {4000, 4096, 4096}, {100, 128, 128}, {3000, 3000, 3000},
	} {
		if got := spanBucket(tc.need, tc.max); got != tc.want {
			t.Errorf("spanBucket(%d, %d) = %d, want %d", tc.need, tc.max, got, tc.want)
		}
	}
}
