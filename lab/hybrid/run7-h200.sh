#!/usr/bin/env bash
# Device call: the hybrid tests (shared layers: the CPU computes the last
# rows of gate and up beside the GPU) and bench engine's 8b half and 70b
# scenarios, whose hybrid rows now compare the planner's shared layers
# with whole FFNs only in the same run.
. "$(dirname "$0")/lib.sh"
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'Hybrid' -test.v >"$L/hybrid-tests.txt" 2>&1)
echo "hybrid tests rc=$?"
grep -E -- '^(--- |    --- )|FAIL|panic|worst' "$L/hybrid-tests.txt" | cut -c1-200 | head -40
timeout 420 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals|  decode, batch 1 |H2D during decode  " "$L/bench-engine.txt" | cut -c1-300
