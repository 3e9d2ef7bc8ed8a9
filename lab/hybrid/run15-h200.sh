#!/usr/bin/env bash
# Device call (what the budget left of run14): the MoE engine tests on the
# final tree, then the 70b in 24 GiB on the byte ring and on the slot ring
# (bin/gpu-tests/strata-slots: a124d62 plus the hand-over by kernels), the
# ring's own A/B with the hand-over fixed.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine && timeout 45 "$B/engine.test" -test.v -test.run 'ExpertsOnDeviceCUDA|MoEOnCUDA|ExpertsOnStorageCUDA') >"$L/engine.log" 2>&1
echo "== engine rc=$?"; grep -E -- "^(--- |ok|FAIL)|panic" "$L/engine.log" | head
for v in ring:$B/strata slots:$B/strata-slots; do
	n=${v%%:*} s=${v#*:}
	timeout 110 "$s" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json >"$L/bench-$n.txt" 2>&1
	echo "== $n rc=$?"; grep -E "hybrid|goals" "$L/bench-$n.txt" | cut -c1-230
done
