// Command stratad will be strata's privileged daemon (issue 4). Until it
// lands this main only says so, so that the design card's layout and the
// build of ./... stay whole.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "stratad: the daemon is not implemented yet (issue 4); use `strata run` for offline generation")
	os.Exit(1)
}
