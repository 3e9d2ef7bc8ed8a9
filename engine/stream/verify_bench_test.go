package stream_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// BenchmarkXXH3 is the cost of VerifyAlways: the checksum every tier-C
// read pays, in bytes per second per core, at extent sizes from a small
// model's layer to a 70B one's. Compare it with the storage link
// (BenchmarkFileSource, strata bench storage) and with the same pipeline
// under --verify never (strata bench stream --verify never).
func BenchmarkXXH3(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20, 256 << 20} {
		buf := make([]byte, size)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			var sum uint64
			for b.Loop() {
				sum ^= xxh3.Hash(buf)
			}
			_ = sum
		})
	}
}
