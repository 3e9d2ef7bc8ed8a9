#!/usr/bin/env bash
# Device call: the CPU's threads held polling through each pass
# (gpu.Model.SetCPUHold, workpool.Pool.Hold; off by default): TestCPUHold
# and the hybrid tests, then bench engine --only streamed twice, whose
# hybrid_hold_* rows time batch 1 held beside hybrid_* not held in one run.
# The MoE side is lab/moe/run28-h200.sh (dev_stream_hold_*). Carry
# bin/gpu-tests.txz.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'CPUHold|Hybrid' -test.v -test.timeout 2m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/bench-$i.txt" 2>&1
	echo "== bench $i rc=$? at ${SECONDS}s"; grep -E "hybrid" "$L/bench-$i.txt" | grep -v "s\]" | cut -c1-220
done
