//go:build !race

package gocodetest

// Race is true when the race detector is on: tests then check fewer
// golden tokens, which cost ten times more.
const Race = false
