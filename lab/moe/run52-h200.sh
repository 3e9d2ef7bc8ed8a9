#!/usr/bin/env bash
# Device call (session 55): the picked expert kernels over a batch pass's
# picks (branch moe-batch-picked: four launches a layer for the GPU's
# share where the grouped products launched a few an expert) against
# main, and with the pick stream's 2K slots (moe-batch-picked-2k), on the
# served batch of Qwen3-30B-A3B at 8 GiB, alternating, after the picked
# branch's kernel and MoE tests. run51 found the served batch flat at
# ~105 tok/s whatever share PCIe carried (0.35, 0.55, 0.72), the CPU
# busy 0.70-0.81 of the pass but reading 25-38 GB/s: the host issuing
# the GPU's launches beside it is the pass. Carry bin/ab.txz:
# ab/strata-k (main), ab/strata-kc, ab/strata-pk, ab/strata-pkc,
# ab/strata-p2k, ab/kernels.test and ab/engine-gpu.test (moe-batch-picked).
. "$(dirname "$0")/ablib.sh"
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'TestMoE' -test.count 1 >"$L/kernels.txt" 2>&1)
echo "== kernels rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)|failOnDevice|want' "$L/kernels.txt" | head -5
(cd engine/gpu && timeout 90 "$B/engine-gpu.test" -test.run 'TestStreamPicks|TestMoEOnCUDA|TestBatchShare' -test.count 1 >"$L/engine-gpu.txt" 2>&1)
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$L/engine-gpu.txt" | head -5
# LIMIT (seconds, default 300): no bench starts after LIMIT-40.
for round in 1 2; do
	for v in k kc pk pkc p2k; do
		[ $SECONDS -lt $((${LIMIT:-300} - 40)) ] || break 2
		timeout 240 "$B/strata-$v" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
			--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served-$v-$round.txt" 2>&1
		echo "== $v round $round rc=$? at ${SECONDS}s: $(grep -E '^ +(served decode, batch 8|of the other picks|CPU busy|CPU.s expert reads|hand-overs|the batch.s wall time)' "$L/served-$v-$round.txt" | grep -oE '[0-9.]+ (tok/s|share|GB/s|s)|[0-9.]+x' | tr '\n' ' ')"
	done
done
# The variant with the best mean served batch, for a later call on the warm
# machine: STRATA=$(cat /dev/shm/run52-winner) bash lab/peers/run5-h200.sh
best=$(for v in k kc pk pkc p2k; do
	grep -hE '^ +served decode, batch 8' "$L"/served-$v-*.txt 2>/dev/null | grep -oE '[0-9.]+ tok/s' |
		awk -v v=$v '{s+=$1; n++} END {if (n) printf "%s %.2f\n", v, s/n}'
done | sort -k2 -nr | head -1)
echo "== best: $best"
[ -z "$best" ] || echo "bin/ab/strata-${best%% *}" >$S/run52-winner
