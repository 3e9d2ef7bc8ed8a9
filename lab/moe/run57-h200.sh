#!/usr/bin/env bash
# Device call (written in session 58): the served batch of Qwen3-30B-A3B
# at 8 GiB, ABBAABBA in one lease, over ab/strata-main (a pass that may
# put the host's threads to work waits for the device asleep:
# cudadrv.Device.DoSleeping) and ab/strata-pre (2c47bcf: the forward
# caller polls through the pass for up to the 20 ms hand-off spin,
# holding a core and a Go processor beside the CPU pool's 16 threads).
# run55/56 found GOMAXPROCS=15 at +3% (noisy) and a longer pool spin at
# -14%: both bear on the processors the pool's threads get. Stops
# starting runs past LIMIT (default 200) seconds. Carry bin/gpu-tests.txz
# from `bash lab/bundle.sh pre=2c47bcf`.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-200}
for v in main pre pre main main pre pre main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	served "$v" 8
done
