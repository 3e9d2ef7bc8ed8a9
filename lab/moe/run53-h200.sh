#!/usr/bin/env bash
# Device call (session 56), for a short budget: the served batch of
# Qwen3-30B-A3B at 8 GiB on main (the picked kernels, 2K slots) with the
# new row of the host thread's time issuing the GPU's share beside the
# CPU's work (of the CPU's busy time), then as much of
# lab/peers/run5-h200.sh (ONLY=qwen-29: llama.cpp's batch-8 peer of the
# same file) as LIMIT (default 290) leaves. Before the peers: engine/gpu's
# TestStreamPicksBatch (its beside bound) and the host CPU's MoE block
# alone (BenchmarkMoEFFN: every pick, one, and a third of the experts, at
# one and eight tokens), to set the served batch's CPU rate against.
# Carry bin/gpu-tests.txz (strata, engine-gpu.test and engine-model.test
# are enough) and bin/llama-src.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 120 "$B/strata" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
	--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served.txt" 2>&1
echo "== served rc=$? at ${SECONDS}s"
grep -E '^ +(served decode|picks|of the other|CPU|the host|hand-overs|batch layers|the batch)' "$L/served.txt" | cut -c1-60,100-140
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run 'TestStreamPicksBatch' -test.count 1 >"$L/engine-gpu.txt" 2>&1)
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)|beside' "$L/engine-gpu.txt" | head -5
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run '^$' -test.bench 'BenchmarkMoEFFN$' -test.benchtime 1s >"$L/moeffn.txt" 2>&1)
echo "== moeffn rc=$? at ${SECONDS}s"; grep -E '^Benchmark' "$L/moeffn.txt"
ONLY=qwen-29 LIMIT=$((${LIMIT:-290} - SECONDS)) bash lab/peers/run5-h200.sh
