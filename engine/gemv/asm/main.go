// Command asm generates package gemv's kernels (zkernels_amd64.s and their
// Go declarations, zkernels_amd64.go) with avo. Run it through go generate
// in engine/gemv. Every kernel has the signature of gemv's kernel type and
// implements, bit for bit, the contract of gemv's ref.go.
package main

import (
	"flag"

	. "github.com/mmcloughlin/avo/build"
)

const signature = "func(w *byte, stride, rows, n int, q *int16, d *float32, s *int32, f *float32, y *float32)"

func main() {
	flag.IntVar(&prefetchAhead, "prefetch", prefetchAhead, "bytes ahead of the block in hand the kernels prefetch weights (0: none; AVX2's INT8Row and float kernels never do: their rows stream well without)")
	flag.Parse() // with avo's own flags (-out, -stubs, -pkg), on the same set

	ConstraintExpr("amd64")
	q4kAVX2("q4kAVX2", false)
	q4kAVX2("q5kAVX2", true)
	q4kAVX2x("q4kAVX2x4", false)
	q4kAVX2x("q5kAVX2x4", true)
	q6kAVX2("q6kAVX2")
	q6kAVX2x("q6kAVX2x4")
	q32AVX2("q8AVX2", false)
	q32AVX2("q4AVX2", true)
	i8AVX2("i8AVX2")
	floatAVX2("f32AVX2", fF32)
	floatAVX2("f16AVX2", fF16)
	floatAVX2("bf16AVX2", fBF16)
	for _, vnni := range []bool{false, true} {
		sfx := map[bool]string{false: "AVX512", true: "VNNI"}[vnni]
		q4kAVX512("q4k"+sfx, false, vnni)
		q4kAVX512("q5k"+sfx, true, vnni)
		q6kAVX512("q6k"+sfx, vnni)
		q4kAVX512x("q4k"+sfx+"x4", false, vnni)
		q4kAVX512x("q5k"+sfx+"x4", true, vnni)
		q6kAVX512x("q6k"+sfx+"x4", vnni)
	}
	q32AVX512x("q8AVX512x4", false)
	q32AVX512x("q4AVX512x4", true)
	i8AVX512("i8AVX512", false)
	i8AVX512("i8VNNI", true)
	floatAVX512("f32AVX512", fF32)
	floatAVX512("f16AVX512", fF16)
	floatAVX512("bf16AVX512", fBF16)
	floatAVX512x("f16AVX512x4", fF16)
	floatAVX512x("bf16AVX512x4", fBF16)
	tilesAMX()
	tilesAMX2()
	q4kWiden("q4kWiden")
	q6kWiden("q6kWiden")
	q8Widen("q8Widen")
	q4kPanel("q4kPanelVNNI")
	q5kPanel("q5kPanelVNNI")
	q6kPanel("q6kPanelVNNI")
	tilesSetAVX512()
	scores4(attn512)
	mix4(attn512)
	softmax(attn512)
	glu(attn512, false)
	glu(attn512, true)
	scores4(attn2)
	mix4(attn2)
	softmax(attn2)
	glu(attn2, false)
	glu(attn2, true)
	Generate()
}
