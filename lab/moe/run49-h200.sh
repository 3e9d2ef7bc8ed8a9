#!/usr/bin/env bash
# Device call (written session 53, not yet run): at more than one token
# the resident experts' launches issued beside the CPU's work (branch
# moe-beside-batch; at one token they already are), where they were
# issued before the CPU's threads started: tens a layer at eight tokens.
# First engine/gpu's MoE tests of the branch (TestMoEOnCUDA runs passes of
# two sequences with some experts resident), then the served batch of
# Qwen3-30B-A3B at 8 GiB (8 requests of 128 tokens through the
# scheduler), the branch's strata against main's, alternating, three
# rounds. Carry bin/ab.txz (strata-main, strata-beside, engine-gpu.test
# of the branch).
set -uo pipefail
cd "$(dirname "$0")/../.."
L=${OUT:-h200-logs} S=/dev/shm
mkdir -p "$L"
tar xJf bin/ab.txz -C bin || exit 2
B=$PWD/bin/ab
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 240 "$B/engine-gpu.test" -test.run 'TestMoE' -test.count 1 >"$L/engine-gpu-moe.txt" 2>&1)
echo "== engine-gpu TestMoE rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$L/engine-gpu-moe.txt" | head
for round in 1 2 3; do
	for v in main beside; do
		timeout 90 "$B/strata-$v" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
			--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served-$v-$round.txt" 2>&1
		echo "== $v round $round rc=$? at ${SECONDS}s: $(grep -E '^ +served decode, batch 8' "$L/served-$v-$round.txt" | grep -oE '[0-9.]+ tok/s')"
	done
done
