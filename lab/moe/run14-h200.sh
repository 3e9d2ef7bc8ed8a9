#!/usr/bin/env bash
# Device call: the placement that weighs a CPU layer's fixed cost
# (tier.DeviceCost, gpu.Model.MoEHop: whole layers for a near-uniform
# routing) against the placement by use per byte alone (rows dev_use_*),
# strata bench engine --only moe and llama-bench --n-cpu-moe on the same
# files; llama-bench does not travel with this tree (the 64 MiB limit), so
# the peer ratios are to docs/peers-h200.json's figures of another lease.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'MoE|GEMVEach|QuantizeHeld' -test.v -test.timeout 5m) >"$L/kernels.log" 2>&1
echo "== kernels rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic|MoEPicked" "$L/kernels.log" | head
(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'MoE|ExpertTrial|SetResidentExperts|MoEHop' -test.v -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic|Q4KM.*worst|_test.go" "$L/engine-gpu.log" | cut -c1-300 | head -20
(cd engine && timeout 150 "$B/engine.test" -test.run 'ExpertsOnStorageCUDA|ExpertsOnDeviceCUDA|MoEOnCUDA' -test.timeout 5m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head
timeout 170 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|trial kept|whole layers" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
