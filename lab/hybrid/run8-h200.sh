#!/usr/bin/env bash
# Device call: as run7, with the batch-1 plan mixing whole FFNs and shared
# layers, and the bench always timing whole FFNs only beside it: the
# hybrid tests, then bench engine streamed,70b.
. "$(dirname "$0")/lib.sh"
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'Hybrid' -test.v >"$L/hybrid-tests.txt" 2>&1)
echo "hybrid tests rc=$?"
grep -E -- '^(--- |    --- )|FAIL|panic|worst' "$L/hybrid-tests.txt" | cut -c1-200 | head -40
timeout 380 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals|  decode, batch 1 |H2D during decode  " "$L/bench-engine.txt" | cut -c1-300
timeout 150 "$B/strata" bench engine --synth-dir $S --only families --peers docs/peers-h200.json \
	--json-file "$L/bench-families.json" >"$L/bench-families.txt" 2>&1
echo "bench families rc=$?"
grep -E "decode|goals" "$L/bench-families.txt" | cut -c1-200
