#!/usr/bin/env bash
# Device call (session 54): why the CPU's MoE block reads experts at a
# third of the host's rate at eight tokens, then branches moe-beside-batch
# and moe-batch-stream (on top of it) against main on the served batch.
#  1. engine/model's BenchmarkMoEFFN (one Qwen3-30B-A3B block on the CPU,
#     every pick computed) at one and at eight tokens, a CPU profile each.
#  2. engine/gpu's MoE and pick-stream tests of moe-batch-stream
#     (TestMoEOnCUDA runs passes of two sequences with some experts
#     resident; TestStreamPicksBatch the stream at more than one token).
#  3. The served batch of Qwen3-30B-A3B at 8 GiB (8 requests of 128 tokens
#     through the scheduler): main, beside and stream alternating, three
#     rounds (the first call synthesizes the model).
# Carry bin/ab.txz: ab/strata-main, ab/strata-beside, ab/strata-stream,
# ab/engine-gpu.test (moe-batch-stream), ab/engine-model.test (main).
# PART=1|2|3 runs one part.
. "$(dirname "$0")/ablib.sh"
part() { [ -z "${PART:-}" ] || [ "$PART" = "$1" ]; }
nproc; lscpu | grep -E 'Model name|^CPU\(s\)|L3' | head -4
if part 1; then
	for T in 1 8; do
		(cd engine/model && timeout 150 "$B/engine-model.test" -test.run '^$' -test.bench "BenchmarkMoEFFN\$/.*/all/T$T\$" \
			-test.benchtime 4s -test.cpuprofile "$L/moeffn-T$T.pprof" >"$L/moeffn-T$T.txt" 2>&1)
		echo "== BenchmarkMoEFFN T$T rc=$? at ${SECONDS}s"; grep -E 'Benchmark|FAIL' "$L/moeffn-T$T.txt"
	done
fi
if part 2; then
	(cd engine/gpu && timeout 240 "$B/engine-gpu.test" -test.run 'TestMoE|TestStreamPicks|TestBatchShare' -test.count 1 >"$L/engine-gpu-moe.txt" 2>&1)
	echo "== engine-gpu TestMoE rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$L/engine-gpu-moe.txt" | head
fi
if part 3; then
	for round in 1 2 3; do
		for v in main beside stream; do
			timeout 300 "$B/strata-$v" bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
				--moe-fixed=false --moe-served 0 --moe-served-batch 8 >"$L/served-$v-$round.txt" 2>&1
			echo "== $v round $round rc=$? at ${SECONDS}s: $(grep -E '^ +served decode, batch 8' "$L/served-$v-$round.txt" | grep -oE '[0-9.]+ tok/s')"
		done
	done
fi
