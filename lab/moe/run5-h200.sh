#!/usr/bin/env bash
# Device call: workpool's yielding (every 20 us in unpinned workers, never
# in pinned ones: bin/ab/*-y20) against never yielding (*-yn), beside the
# old channel pool (bin/gpu-tests/strata); the MoE block's scaling by
# thread count with the routings drawn before the clock; a trace of it.
. "$(dirname "$0")/../hybrid/lib.sh"
cd engine/model
for n in y20 yn y20 yn; do
	timeout 60 ../../bin/ab/model-$n.test -test.run XXX -test.bench 'FFN/avx512/T1$|MoEFFN' -test.benchtime 2s -test.cpu 16 >"$L/ffn-$n.log" 2>&1
	echo "== $n"; grep Bench "$L/ffn-$n.log"
done
timeout 90 ../../bin/ab/model-y20.test -test.run XXX -test.bench 'FFN/avx512/T1$|MoEFFN/avx512/T1$' -test.benchtime 1s -test.cpu 1,2,4,8 2>&1 | grep Bench
timeout 60 ../../bin/ab/model-y20.test -test.run XXX -test.bench 'MoEFFN/avx512/T1$' -test.benchtime 300x -test.cpu 16 -test.trace "$L/moe.trace" >/dev/null 2>&1
cd ../..
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
for v in old:$B/strata y20:bin/ab/strata-y20 yn:bin/ab/strata-yn old2:$B/strata y20b:bin/ab/strata-y20 ynb:bin/ab/strata-yn; do
	n=${v%%:*} s=${v#*:}
	timeout 60 "$s" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu-$n.txt" 2>&1
	echo "== cpu $n rc=$?"; grep -E "^ +16 |Q4_K|Q6_K|decode" "$L/cpu-$n.txt" | head -6
done
