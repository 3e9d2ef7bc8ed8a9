//go:build race

package model

// raceEnabled trims the slowest real-model runs under the race detector,
// which makes the arithmetic about ten times slower and adds nothing to
// what it checks there.
const raceEnabled = true
