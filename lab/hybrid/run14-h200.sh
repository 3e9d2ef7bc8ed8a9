#!/usr/bin/env bash
# Device call: bench engine --only streamed,70b on the byte ring with the
# mapped hand-over (issue 20's figures in one run); the 70b again on the
# slot ring with the mapped hand-over (bin/gpu-tests/strata-slots: a124d62
# plus the hand-over commits), the ring's own A/B; then the GPU tests the
# changes touch (TestExpertsOnDeviceCUDA's fix among them).
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
T=$L
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json \
	>"$T/bench-ring.txt" 2>&1
echo "== ring rc=$?"; grep -E "hybrid|decode, batch 1 |goals|^\[(streamed|70b)" "$T/bench-ring.txt" | grep -v "%" | cut -c1-230
timeout 70 "$B/strata-slots" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json \
	>"$T/bench-slots.txt" 2>&1
echo "== slots rc=$?"; grep -E "hybrid|goals" "$T/bench-slots.txt" | cut -c1-230
s() { n=$1 d=$2 to=$3; shift 3; (cd $d && timeout $to "$@") >"$T/$n.log" 2>&1; echo "== $n rc=$? pass=$(grep -c -- '--- PASS' $T/$n.log)"; grep -E -- "--- FAIL|^FAIL|panic" "$T/$n.log" | head -8; }
s engine engine 45 "$B/engine.test" -test.v -test.run 'ExpertsOnDeviceCUDA|MoEOnCUDA|ExpertsOnStorageCUDA'
