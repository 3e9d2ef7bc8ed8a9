#!/usr/bin/env bash
# Device call: the 8b half's hybrid pass, where its wall time goes on the
# host (bench engine --only streamed --timeline: the host phases per pass
# beside the GPU's per-layer timeline); run42 found ~2.3 ms of a 16.27 ms
# pass outside the GPU's timeline. Twice. Carry bin/gpu-tests.txz.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json >"$L/streamed-$i.txt" 2>&1
	echo "== streamed $i rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)|note: hybrid" "$L/streamed-$i.txt" | grep -v "s\]" | cut -c1-330
done
