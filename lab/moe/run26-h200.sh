#!/usr/bin/env bash
# Device call (run26: the fits explored one layer in 8; run25: the split by fitted fixed costs and rates; run24: by rates alone): a share of each CPU layer's picks at one token copied over
# PCIe into staging slots and computed on the GPU beside the CPU
# (gpu.Model.SetStreamPicks, engine/gpu/moestream.go), and MoEHop timing
# another layer's experts each call. "tests": the MoE GPU tests with it;
# "bench": strata bench engine --only moe, whose dev_stream_* rows time
# batch 1 with it beside dev_* without. Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
case ${1:-tests} in
tests)
	(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'StreamPicks|StreamSplit|MoE|ResidentExperts' -test.v -test.timeout 4m) >"$L/engine-gpu.log" 2>&1
	echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic|moestream_test.go" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | cut -c1-600 | head -40
	;;
bench)
	timeout 420 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
	echo "== moe rc=$? at ${SECONDS}s"
	grep -E "^  decode, batch 1|over PCIe|fixed cost" "$L/bench-moe.txt" | cut -c1-260 | sed -E 's/ {3,}/  /g'
	;;
esac
