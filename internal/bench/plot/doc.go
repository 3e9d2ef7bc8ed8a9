// Package plot draws the line charts strata bench writes with --plot: one
// line per series (a queue depth, a copy direction), optionally on a log2 x
// axis (block and copy sizes double from point to point), as a standalone
// SVG file that any browser shows. It is small on purpose — axes, ticks,
// labels, a legend — and needs no library: the charts are simple and a
// plotting dependency would be the largest thing in the client.
package plot
