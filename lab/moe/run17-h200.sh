#!/usr/bin/env bash
# Device call: the placement of experts in device memory chosen by held-out
# counts (tier.DeviceCost.Holdout: whole layers first where the held-out
# tokens do not share the calibration's skew), under the GPU tests that
# place experts (engine's calibration now split in halves), then
# strata bench engine --only moe (own routing and Zipf 1).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine && timeout 150 "$B/engine.test" -test.run 'ExpertsOnStorageCUDA|ExpertsOnDeviceCUDA|MoEOnCUDA' -test.timeout 5m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head
timeout 400 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|trial kept|whole layers" "$L/bench-moe.txt" | cut -c1-170 | sed -E 's/ {3,}/  /g'
