#!/usr/bin/env bash
# Device call (session 54): the pick stream's slots at twice a token's
# picks (branch moe-stream-2k) against a token's picks (main), on the
# served batch of Qwen3-30B-A3B at 8 GiB, alternating, after the
# branch's pick-stream tests. Carry bin/ab.txz: ab/strata-k (main),
# ab/strata-2k and ab/engine-gpu.test (the branch).
set -uo pipefail
cd "$(dirname "$0")/../.."
L=${OUT:-h200-logs} S=/dev/shm
mkdir -p "$L"
tar xJf bin/ab.txz -C bin || exit 2
B=$PWD/bin/ab
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'TestStreamPicks|TestMoEOnCUDAQ4KM' -test.count 1 >"$L/engine-gpu.txt" 2>&1)
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$L/engine-gpu.txt" | head -5
for round in 1 2; do
	for v in k 2k; do
		timeout 240 "$B/strata-$v" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
			--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served-$v-$round.txt" 2>&1
		echo "== $v round $round rc=$? at ${SECONDS}s: $(grep -E '^ +(served decode, batch 8|of the other picks)' "$L/served-$v-$round.txt" | grep -oE '[0-9.]+ (tok/s|share)' | tr '\n' ' ')"
	done
done
