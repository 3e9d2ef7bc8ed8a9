#!/usr/bin/env bash
# Device call (written in session 59): the served batch of Qwen3-30B-A3B
# at 8 GiB in one lease over ab/strata-main (a pass that may put the
# host's threads to work waits for the device asleep: DoSleeping),
# ab/strata-pre (2c47bcf: the forward's caller polls through the pass)
# and ab/strata-s1m (main with the pool's spin at 1 ms: run55 lost 14%
# with it while the caller polled beside the pool; with the caller asleep
# the longer spin may now keep the threads awake through the hand-overs
# without one too many). Order ABCCBA, repeated while LIMIT (default 500)
# seconds allow. Carry bin/gpu-tests.txz from
# `bash lab/bundle.sh pre=2c47bcf s1m=lab-s1m`.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-500}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
for v in main pre s1m s1m pre main main pre s1m s1m pre main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	served "$v" 8
done
