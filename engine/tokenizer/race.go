//go:build race

package tokenizer

// raceEnabled: the race detector's shadow memory rules out an address-space
// limit on template workers.
const raceEnabled = true
