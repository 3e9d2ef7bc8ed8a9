package hostcpu

import "testing"

func TestPause(t *testing.T) {
	t.Parallel()
	for range 1000 {
		Pause()
	}
}
