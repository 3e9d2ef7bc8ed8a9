package volume_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/strata-llm/strata/nvme"
)

// TestNVMeRetries: a read that fails with a transient status (no Do Not
// Retry, a transfer rather than a media problem) is submitted again, up to
// twice, and succeeds with the right bytes when the fault passes; media
// errors and Do Not Retry statuses fail at once. Both paths: DMA-mapped
// memory from Alloc (split over the queues) and ordinary memory (bounce
// buffers).
func TestNVMeRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		st      nvme.Status
		times   int
		ok      bool
		retries int64
	}{
		{"transient internal error once", nvme.StatusInternal, 1, true, 1},
		{"transient data transfer error twice", nvme.StatusDataTransfer, 2, true, 2},
		{"internal error three times", nvme.StatusInternal, 3, false, 2},
		{"media error", nvme.StatusUnrecoveredRead, 1, false, 0},
		{"do not retry", nvme.StatusInvalidField, 1, false, 0},
	} {
		for _, mapped := range []bool{true, false} {
			name := tc.name + "/bounce"
			if mapped {
				name = tc.name + "/mapped"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				sw, dev, _ := nvmeVolume(t, 4096, 16<<20)
				want := sw.Data(1)[1<<20 : 1<<20+256<<10]
				for i := range want {
					want[i] = byte(i * 7)
				}
				p := make([]byte, len(want))
				if mapped {
					b, free, err := dev.Alloc(len(want))
					if err != nil {
						t.Fatal(err)
					}
					defer free()
					p = b
				}
				const lba = 1 << 20 / 4096
				sw.InjectErrorTimes(1, nvme.OpRead, lba+10, 1, tc.st, tc.times)
				err := dev.ReadBlocks(ctx, lba, p)
				var se *nvme.StatusError
				switch {
				case tc.ok && (err != nil || !bytes.Equal(p, want)):
					t.Fatalf("read: %v, bytes right %v", err, bytes.Equal(p, want))
				case !tc.ok && (!errors.As(err, &se) || se.Status != tc.st):
					t.Fatalf("read: %v, want the status %v", err, tc.st)
				case dev.Retries() != tc.retries:
					t.Fatalf("%d retries, want %d", dev.Retries(), tc.retries)
				}
			})
		}
	}
}
