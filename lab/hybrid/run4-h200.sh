#!/usr/bin/env bash
# Device call: tier B in huge pages (bin/gpu-tests' strata) against
# cuMemHostAlloc's pages (bin/ab/strata-4k), bench engine --only
# streamed,70b each, interleaved by scenario.
. "$(dirname "$0")/lib.sh"
for sc in streamed 70b; do
	for v in thp:$B/strata 4k:bin/ab/strata-4k; do
		n=${v%%:*} s=${v#*:}
		timeout 200 "$s" bench engine --synth-dir $S --only $sc --peers docs/peers-h200.json --json-file "$L/bench-$sc-$n.json" >"$L/bench-$sc-$n.txt" 2>&1
		echo "== $sc $n rc=$?"
		grep -E "hybrid|  decode, batch 1 " "$L/bench-$sc-$n.txt" | cut -c1-230
	done
done
