#!/usr/bin/env bash
# Device call: engine/model's GLU activation applied by the down product's
# input quantization (672cf62) against its own pass (aa98ca2), bin/ab.txz:
# model-old.test (aa98ca2), model-new.test (672cf62), built with
#   go test -c -ldflags='-s -w' -o bin/ab/model-{old,new}.test ./engine/model
# from worktrees of the two commits; interleaved old/new: the MoE block
# (BenchmarkMoEFFN, whose one/T1 is the call's fixed cost), the 8b's dense
# FFN (BenchmarkFFN) and the CPU decode of a synthetic 8b
# (BenchmarkDecode8B), 16 threads.
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
