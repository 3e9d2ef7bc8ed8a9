//go:build race

package stream_test

// raceEnabled trims the slowest test matrices under the race detector,
// which makes the forward pass's arithmetic ~10x slower while adding
// nothing to what the pipeline's concurrency is checked for.
const raceEnabled = true
