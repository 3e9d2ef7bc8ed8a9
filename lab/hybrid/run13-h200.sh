#!/usr/bin/env bash
# Device call: the MoE GPU tests (routing on the device, experts in device
# memory), issue 25's MoE bench, then the hybrid A/B of run12 (byte ring +
# mapped hand-over vs a124d62's slot ring and copies), 8b half and 70b.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'TestMoERoute|TestMoEGatherCombine|TestLoad|TestPDLEntries|TestEmbeddedEntries|CopyMapped' -test.v) >"$L/kernels-moe.log" 2>&1
grep -E -- "^(--- |ok|FAIL)|panic" "$L/kernels-moe.log" | head -20
(cd engine/gpu && timeout 90 "$B/engine-gpu.test" -test.run 'TestMoEOnCUDA|TestMoEOnCUDAQ4KM|TestSetResidentExperts|TestMoEOnCPU|TestHybrid' -test.v) >"$L/engine-gpu-moe.log" 2>&1
grep -E -- "^(--- |ok|FAIL)|panic" "$L/engine-gpu-moe.log" | head -30
(cd engine && timeout 120 "$B/engine.test" -test.run 'TestMoEOnCUDA|TestExpertsOnDeviceCUDA|TestExpertsOnStorageCUDA' -test.v -test.timeout 30m) >"$L/engine-moe.log" 2>&1
grep -E -- "^(--- |ok|FAIL)|panic" "$L/engine-moe.log" | head -20
timeout 150 bash lab/moe/run-h200.sh 2>&1 | grep -E "^\[moe|decode, batch|CPU busy|rc=|FAIL|panic" | cut -c1-180
rm -f $S/qwen3moe-* $S/mixtral-*
for v in new:$B/strata old:$B/strata-old; do
	n=${v%%:*} s=${v#*:}
	timeout 130 "$s" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json \
		--json-file "$L/bench-$n.json" >"$L/bench-$n.txt" 2>&1
	echo "== $n rc=$?"
	grep -E "hybrid|goals|  decode, batch 1 " "$L/bench-$n.txt" | cut -c1-230
done
