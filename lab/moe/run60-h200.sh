#!/usr/bin/env bash
# Device call (written in session 59): the two CPU-side changes of that
# session, measured in one lease, after engine/gpu's pick-stream tests
# (TestStreamPicksBatch checks the new timing). ab/strata-main (a step's row chunks
# sized by its work, c7ac69a; a step that finds threads asleep wakes all
# of them; the GPU side's tail past the CPU's in a new row,
# served_batch8_pcie_tail), ab/strata-side (main with lab/moe/side.patch:
# a batch layer's split balances the CPU with that GPU side's fit instead
# of the copies' alone), ab/strata-ring (f8ef70a: the wake-ups alone) and
# ab/strata-pre (20e0f01: neither): the served batch of Qwen3-30B-A3B at
# 8 GiB, ABCDDCBA, then at 4 GiB main and pre ABBA; then the CPU-only 8b
# decode (bench cpu, 16 threads) over main and pre (issue 20's CPU goal:
# the chunks change dense steps on 16 threads too), and the MoE block
# alone on this host (BenchmarkMoEFFNGap, main's engine-model.test).
# Stops starting runs past LIMIT (default 560) seconds. Carry
# bin/gpu-tests.txz from
# `bash lab/bundle.sh ring=f8ef70a pre=20e0f01 side=lab/moe/side.patch` (the patch is
# in 7ca231e and deleted since: `git show 7a60046:lab/moe/side.patch`).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-560}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'TestStreamPicks|TestBatchShare' -test.v >"$L/gpu-tests.txt" 2>&1)
echo "== tests rc=$? at ${SECONDS}s"; grep -E '^(--- |ok|FAIL|panic)|side' "$L/gpu-tests.txt" | cut -c1-200 | head -20
for vc in ${ORDER:-main:8 side:8 ring:8 pre:8 pre:8 ring:8 side:8 main:8 main:4 pre:4 pre:4 main:4}; do
	v=${vc%:*} gib=${vc#*:}
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $vc at ${SECONDS}s"; break; }
	served "$v" "$gib"
done
M8=$S/llama-8b-q4_k_m-seed1.gguf
for v in main pre pre main; do
	[ "$SECONDS" -lt $((LIMIT - 60)) ] || { echo "== stopped before cpu $v at ${SECONDS}s"; break; }
	[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
	timeout 60 bin/ab/strata-$v bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >>"$L/cpu-$v.txt" 2>&1
	echo "== cpu $v rc=$? at ${SECONDS}s"; grep -E "^ +(Q4_K|Q6_K)|decode" "$L/cpu-$v.txt" | tail -3 | cut -c1-160
done
if [ "$SECONDS" -lt $((LIMIT - 40)) ]; then
	(cd engine/model && timeout 60 "$B/engine-model.test" -test.run '^$' -test.bench 'BenchmarkMoEFFNGap/qwen3moe-30b/batch8|BenchmarkMoEFFN$/.*/third/T8' -test.benchtime 300x >"$L/moeffn.txt" 2>&1)
	echo "== moeffn rc=$? at ${SECONDS}s"; grep Bench "$L/moeffn.txt"
fi
