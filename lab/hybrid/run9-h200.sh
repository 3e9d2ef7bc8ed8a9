#!/usr/bin/env bash
# Device call: bench engine streamed,70b with the memory-read ceiling and
# the copy engine's in-pass rate reported beside the hybrid rows.
. "$(dirname "$0")/lib.sh"
timeout 500 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals|  decode, batch 1 |H2D during decode  " "$L/bench-engine.txt" | cut -c1-300
