#!/usr/bin/env bash
# Device call: `strata bench engine --only moe` (issue 25's benchmarks) on
# the H200: Qwen3-30B-A3B Q4_K_M with 8 and 4 GiB of device memory (one
# file for both), Mixtral-8x7B Q4_K_M with 12 GiB; attention on the GPU,
# every FFN block on the CPU; batch 1 and 8, the model's own routing and a
# Zipf skew of exponent ZIPF (default 1). Build here first with
# `setup/gpu-tests.sh build` (bin/gpu-tests.txz travels with the tree).
# The two models take ~43 GiB of /dev/shm: synthetic files of the other
# scenarios left by an earlier call on a warm machine are removed first
# when the space is short.
. "$(dirname "$0")/../hybrid/lib.sh"
ZIPF=${ZIPF:-1}
need=$((46 << 20)) # KiB: the two models and some room
free_kib() { df -Pk "$S" | awk 'NR==2 {print $4}'; }
for f in "$S"/llama-70b-*-seed1.gguf* "$S"/llama-8b-bf16-seed1.gguf* "$S"/*-8b-q4_k_m-seed1.gguf "$S"/gemma3-12b-*-seed1.gguf "$S"/phi3-4b-*-seed1.gguf; do
	have=0
	for m in qwen3moe-30b-a3b-q4_k_m-seed1.gguf mixtral-8x7b-q4_k_m-seed1.gguf; do
		[ -f "$S/$m" ] && have=$((have + $(du -k "$S/$m" | cut -f1)))
	done
	[ $(($(free_kib) + have)) -ge $need ] && break
	[ -f "$f" ] && echo "removing $f for room" && rm -f "$f"
done
# The scenario on the tiny shapes first (seconds): a bug shows here before
# the synthesis of the real ones.
(cd internal/bench/enginebench && timeout 90 "$B/internal-bench-enginebench.test" -test.run 'MoE' -test.v) >"$L/enginebench-moe-test.log" 2>&1
echo "moe tests rc=$?"
grep -E -- "^(---|ok|FAIL|panic)|moe/" "$L/enginebench-moe-test.log" | head -20
df -h "$S" | tail -1
free -g | head -2
timeout 420 "$B/strata" bench engine --synth-dir "$S" --only moe --moe-zipf "$ZIPF" --peers docs/peers-h200.json \
	--json-file "$L/bench-engine-moe.json" >"$L/bench-engine-moe.txt" 2>&1
echo "bench engine rc=$?"
grep -E "^\[|decode, batch|limit|routed|read per token|CPU busy|FAILED" "$L/bench-engine-moe.txt" | cut -c1-300
