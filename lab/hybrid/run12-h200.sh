#!/usr/bin/env bash
# Device call: the byte ring with the hidden state handed over by kernels
# on mapped pinned memory (bin/gpu-tests/strata) against the slot ring and
# copy-engine hand-over of a124d62 (bin/gpu-tests/strata-old), same run:
# 8b half and 70b in 24 GiB; then the kernels' Copy test.
. "$(dirname "$0")/lib.sh"
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'CopyMapped|Elementwise|PTX' -test.v) >"$L/kernels-copy.log" 2>&1
grep -E -- "^(--- |ok|FAIL)|panic" "$L/kernels-copy.log" | head
for v in new:$B/strata old:$B/strata-old; do
	n=${v%%:*} s=${v#*:}
	timeout 250 "$s" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json \
		--json-file "$L/bench-$n.json" >"$L/bench-$n.txt" 2>&1
	echo "== $n rc=$?"
	grep -E "^\[|hybrid|goals|  decode, batch 1 " "$L/bench-$n.txt" | grep -v "^\[.*(synth|%)" | cut -c1-230
done
# Issue 25's MoE bench on the same binary (experts in huge pages, the
# hand-over by kernels).
bash lab/moe/run-h200.sh 2>&1 | grep -E "^\[moe|decode, batch|CPU busy|rc=" | cut -c1-200
