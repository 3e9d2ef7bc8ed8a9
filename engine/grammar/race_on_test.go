//go:build race

package grammar

// raceEnabled trims the generation-heavy tests under the race detector:
// the fake model's scoring of a whole vocabulary each step is where the
// time goes there, and the shared state they exercise is the same in a
// fifth of the runs.
const raceEnabled = true
