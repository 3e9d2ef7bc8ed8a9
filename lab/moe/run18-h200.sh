#!/usr/bin/env bash
# Device call: engine/model's row chunks counted over a step instead of per
# op (a MoE block's small experts cut into larger chunks; bin/ab.txz:
# model-old.test, model-new.test), interleaved old/new: the MoE block
# (BenchmarkMoEFFN), the 8b's dense FFN (BenchmarkFFN) and the CPU decode of
# a synthetic 8b (BenchmarkDecode8B), 16 threads.
. "$(dirname "$0")/../hybrid/lib.sh"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
export STRATA_BENCH_8B=$M8
cd engine/model
for n in old new old new; do
	f=$L/ffn-$n-$SECONDS.log
	timeout 60 ../../bin/ab/model-$n.test -test.run XXX -test.bench 'FFN' -test.benchtime 2s -test.cpu 16 >"$f" 2>&1
	timeout 40 ../../bin/ab/model-$n.test -test.run XXX -test.bench 'Decode8B' -test.benchtime 2s -test.cpu 16 >>"$f" 2>&1
	echo "== $n rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$f" | sed -E 's/ +/ /g'
done
