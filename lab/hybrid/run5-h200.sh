#!/usr/bin/env bash
# Device call: bench engine --only streamed,70b with re-planning on both
# in-pass rates (CPU FFN and PCIe copy).
set -uo pipefail
cd "$(dirname "$0")/../.."
L=${OUT:-h200-logs}
mkdir -p "$L"
S=/dev/shm
tar xJf bin/gpu-tests.txz -C bin || exit 2
B=$PWD/bin/gpu-tests
timeout 400 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals|  decode, batch 1 |H2D during decode  " "$L/bench-engine.txt" | cut -c1-250
