// Package p2p will describe DMA targets for storage reads: pinned host
// memory and peer device BARs, each admitted only after a self-test
// (issue 6). Not implemented yet; the directory fixes the design card's
// layout.
package p2p
