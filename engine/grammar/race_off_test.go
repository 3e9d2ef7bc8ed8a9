//go:build !race

package grammar

const raceEnabled = false
