#!/usr/bin/env bash
# Device call: bench engine --only streamed,70b with re-planning on both
# in-pass rates (CPU FFN and PCIe copy).
. "$(dirname "$0")/lib.sh"
timeout 400 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals|  decode, batch 1 |H2D during decode  " "$L/bench-engine.txt" | cut -c1-250
