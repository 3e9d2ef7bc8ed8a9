#!/usr/bin/env bash
# Device call (written in session 59): issue 20's 8b half (`bench engine
# --only streamed`: hybrid batch 1 and 8, each pass against its
# combined-link limit) over ab/strata-main and ab/strata-pre, ABBA in one
# lease. Since pre (20e0f01) main has changed three things a hybrid pass
# meets: its caller waits for the device asleep (3878bf7, measured on the
# MoE batch only: +4.5%), a step that finds threads asleep wakes all of
# them, and a step's row chunks are sized by its work (larger for the
# CPU layers' FFNs on 16 threads). On an H200 the figures are the
# issue's own. Stops starting runs past LIMIT (default 400) seconds.
# Carry bin/gpu-tests.txz from `bash lab/bundle.sh pre=20e0f01` (or
# run60's bundle, which holds both).
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-400}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
i=0
for v in main pre pre main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	i=$((i + 1))
	timeout 150 bin/ab/strata-$v bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/streamed-$i-$v.txt" 2>&1
	echo "== streamed $v rc=$? at ${SECONDS}s"; grep -E "hybrid|combined" "$L/streamed-$i-$v.txt" | grep -v "%" | cut -c1-220
done
