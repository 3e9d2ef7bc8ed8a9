#!/usr/bin/env bash
# Device call (written in session 59), after run58 found the pool's 1 ms
# spin -22% with the forward's caller asleep too: the served batch's CPU
# read rate while busy fell 46 -> 32 GB/s with threads that poll through
# the hand-overs, so what costs may be the polling cores' power (the
# cores that compute run slower beside them), not a lack of processors.
# Then a shorter spin than the default 200 us may win: the threads
# sleep early in a hand-over (~240 us a layer in run58) and wake for the
# next layer as half the steps do already. The served batch of
# Qwen3-30B-A3B at 8 GiB over ab/strata-main, ab/strata-s50 (50 us),
# ab/strata-s20 (20 us) and ab/strata-rest (the threads sent to sleep at
# once after a routed call: workpool's Pool.Rest, called at the end of
# FFNRoutedBeside), ABCCBA; then the 4 GiB case, whose staging slots
# cut the PCIe share of 0.58 of the split layers in run58 (8 GiB: 0.16),
# over main and ab/strata-s4k (twice the slots), ABBA; then issue 20's 8b
# half (`bench engine --only streamed`: hybrid batch 1 and 8 against the
# combined-link limit) over main and s20 alternating, while LIMIT
# (default 480) seconds allow; s50 last. ORDER (variant:GiB ...) sets the
# served runs. Carry bin/gpu-tests.txz from
# `bash lab/bundle.sh s50=lab-s50 s20=lab-s20 s4k=lab-s4k rest=lab-rest`.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-480}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
for vc in ${ORDER:-main:8 s20:8 rest:8 rest:8 s20:8 main:8 main:4 s4k:4 s4k:4 main:4 s50:8 s50:8}; do
	v=${vc%:*} gib=${vc#*:}
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $vc at ${SECONDS}s"; break; }
	served "$v" "$gib"
done
i=0
for v in main s20 s20 main; do
	[ "$SECONDS" -lt $((LIMIT - 90)) ] || { echo "== stopped before streamed $v at ${SECONDS}s"; break; }
	i=$((i + 1))
	timeout 150 bin/ab/strata-$v bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/streamed-$i-$v.txt" 2>&1
	echo "== streamed $v rc=$? at ${SECONDS}s"; grep -E "hybrid|combined" "$L/streamed-$i-$v.txt" | grep -v "%" | cut -c1-200
done
