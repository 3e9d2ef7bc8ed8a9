#!/usr/bin/env bash
# Device call: the CPU warming its layers' weights into its 300 MiB L3
# while it waits for the GPU (gpu.Model.SetCPUWarm): bench engine
# --only streamed times the 8b half at batch 1 without (hybrid_*) and then
# with (hybrid_warm_*) in one run, twice, and the GPU tests of the hybrid
# with and without it.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'Hybrid' -test.v -test.timeout 2m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/bench-$i.txt" 2>&1
	echo "== bench $i rc=$? at ${SECONDS}s"; grep -E "hybrid" "$L/bench-$i.txt" | grep -v "s\]" | cut -c1-220
done
