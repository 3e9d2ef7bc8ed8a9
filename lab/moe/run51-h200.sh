#!/usr/bin/env bash
# Device call (session 54): the pick stream at more than one token with
# K slots (main), 2K slots (branch moe-stream-2k) and 2K slots as a ring
# of two halves reused within a layer, any number of experts staged
# (branch moe-stream-ring), on the served batch of Qwen3-30B-A3B at
# 8 GiB, alternating, after the ring branch's MoE and pick-stream tests
# (TestStreamPicksBatch there has halves of one slot). Carry bin/ab.txz:
# ab/strata-k, ab/strata-2k, ab/strata-ring, ab/engine-gpu.test (ring).
. "$(dirname "$0")/ablib.sh"
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'TestStreamPicks|TestMoEOnCUDA|TestBatchShare' -test.count 1 >"$L/engine-gpu.txt" 2>&1)
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$L/engine-gpu.txt" | head -5
for round in 1 2; do
	for v in k 2k ring; do
		timeout 240 "$B/strata-$v" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
			--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served-$v-$round.txt" 2>&1
		echo "== $v round $round rc=$? at ${SECONDS}s: $(grep -E '^ +(served decode, batch 8|of the other picks)' "$L/served-$v-$round.txt" | grep -oE '[0-9.]+ (tok/s|share)' | tr '\n' ' ')"
	done
done
