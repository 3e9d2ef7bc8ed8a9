#!/usr/bin/env bash
# (The trial's tree, 84a5bcb: the whole-layer placement this measured is deleted;
# lab/hybrid/NOTES.md, "Whole layers on the CPU", has the figures.)
# Device call: whole tier-B layers on the CPU (engine/tier's WholeOnCPU,
# their KV cache in host memory) beside the FFN-only share. The hybrid
# tests of engine/gpu (fidelity with whole layers, the caches' rows
# moving when a layer's place changes), then `bench engine --only
# streamed` (the 8b half) with this tree's strata and the one before
# (bin/ab.txz's strata-old) alternating in the same lease. Carry
# bin/gpu-tests.txz (engine-gpu.test and strata only) and bin/ab.txz.
# ONLY=70b runs the 70b in 24 GiB instead of the tests and the 8b.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
if [ "${ONLY:-}" != 70b ]; then
	(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'Hybrid|ForwardExit|PlanPass|SequenceCopy' -test.v >"$L/gpu-tests.txt" 2>&1)
	echo "== tests rc=$? at ${SECONDS}s"; grep -E '^(--- |ok|FAIL|panic)|NMSE|CPU: ' "$L/gpu-tests.txt" | cut -c1-260 | head -60
	i=0
	for v in ${ORDER:-new old new old}; do
		i=$((i + 1)); bin=$B/strata; [ $v = old ] && bin=bin/ab/strata-old
		timeout 150 "$bin" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/streamed-$i-$v.txt" 2>&1
		echo "== streamed $v rc=$? at ${SECONDS}s"; grep -E "hybrid|host read" "$L/streamed-$i-$v.txt" | grep -v "%" | cut -c1-300
	done
else
	for v in new old; do
		bin=$B/strata; [ $v = old ] && bin=bin/ab/strata-old
		timeout 280 "$bin" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json >"$L/70b-$v.txt" 2>&1
		echo "== 70b $v rc=$? at ${SECONDS}s"; grep -E "hybrid|host read" "$L/70b-$v.txt" | grep -v "%" | cut -c1-300
	done
fi
