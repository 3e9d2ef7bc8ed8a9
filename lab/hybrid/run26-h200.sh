#!/usr/bin/env bash
# Device call: the 8b half's hybrid pass laid out layer by layer (bench
# engine --only streamed --timeline), twice, to see where its 1.15-1.25x
# of the combined-link limit goes on the lease's host (run22 did this on
# an H200). Carry bin/gpu-tests.txz.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json --json-file "$L/streamed-$i.json" >"$L/streamed-$i.txt" 2>&1
	echo "== streamed $i rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)|note: hybrid" "$L/streamed-$i.txt" | grep -v "s\]" | cut -c1-400
done
