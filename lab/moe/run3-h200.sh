#!/usr/bin/env bash
# Device call (issue 25's CPU expert rate, issue 20's CPU figures): the MoE
# block of Qwen3-30B-A3B's shape on the CPU alone (engine/model's
# BenchmarkMoEFFN) beside the 8b's dense FFN, by thread count, with three
# row-chunk sizes (bin/ab/model*.test: 2^15, 2^16, 2^17 elements a chunk at
# the least), a CPU profile and an execution trace of the MoE block on 16
# threads; then bench cpu (read probe, Q4_K/Q6_K GEMV, 8b CPU-only decode)
# and the 8b-half hybrid on this tree.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
cd engine/model
for v in s15:model s16:model-s16 s17:model-s17; do
	n=${v%%:*} t=../../bin/ab/${v#*:}.test
	timeout 100 $t -test.run XXX -test.bench 'FFN/avx512/T1$|MoEFFN' -test.benchtime 2s -test.cpu 16 >"$L/ffn-$n.log" 2>&1
	echo "== $n"; grep Bench "$L/ffn-$n.log"
done
timeout 60 ../../bin/ab/model.test -test.run XXX -test.bench 'MoEFFN/avx512/T1$' -test.benchtime 2s -test.cpu 1,4,8 2>&1 | grep Bench
timeout 60 ../../bin/ab/model.test -test.run XXX -test.bench 'MoEFFN/avx512/T1$' -test.benchtime 400x -test.cpu 16 -test.cpuprofile "$L/moe.prof" >/dev/null 2>&1
timeout 60 ../../bin/ab/model.test -test.run XXX -test.bench 'MoEFFN/avx512/T1$' -test.benchtime 200x -test.cpu 16 -test.trace "$L/moe.trace" >/dev/null 2>&1
ls -la "$L"
cd ../..
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
timeout 100 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu.txt" 2>&1
echo "== cpu rc=$?"; grep -E "read|Q4_K|Q6_K|decode|tok/s" "$L/cpu.txt" | head -12
timeout 150 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/bench-streamed.txt" 2>&1
echo "== streamed rc=$?"; grep -E "hybrid|decode, batch 1 |goals" "$L/bench-streamed.txt" | grep -v "%" | cut -c1-230
