#!/usr/bin/env bash
# Device call: internal/workpool (threads poll a counter between steps)
# against engine/model's old channel pool (workers poll with Gosched) —
# bin/ab/model.test is the old pool, model-new.test the new one,
# model-new-s16.test the new one with row chunks of at least 2^16
# elements; strata-new(-s16) likewise. The MoE block and the dense FFN
# alone, bench cpu (GEMV through gemv.Pool, now on workpool; 8b CPU-only
# decode), and the 8b-half hybrid, old then new, in one lease.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
cd engine/model
for n in model model-new model-new-s16 model model-new; do
	timeout 60 ../../bin/ab/$n.test -test.run XXX -test.bench 'FFN/avx512/T1$|MoEFFN' -test.benchtime 2s -test.cpu 16 >"$L/ffn-$n.log" 2>&1
	echo "== $n"; grep Bench "$L/ffn-$n.log"
done
timeout 60 ../../bin/ab/model-new.test -test.run XXX -test.bench 'MoEFFN/avx512/T1$' -test.benchtime 2s -test.cpu 1,4,8 2>&1 | grep Bench
cd ../..
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
for v in old:$B/strata new:bin/ab/strata-new s16:bin/ab/strata-new-s16 old2:$B/strata new2:bin/ab/strata-new; do
	n=${v%%:*} s=${v#*:}
	timeout 60 "$s" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu-$n.txt" 2>&1
	echo "== cpu $n rc=$?"; grep -E "^ +16 |Q4_K|Q6_K|decode" "$L/cpu-$n.txt" | head -6
done
for v in old:$B/strata new:bin/ab/strata-new; do
	n=${v%%:*} s=${v#*:}
	timeout 100 "$s" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/streamed-$n.txt" 2>&1
	echo "== streamed $n rc=$?"; grep -E "hybrid|decode, batch 1 |goals" "$L/streamed-$n.txt" | grep -v "%" | cut -c1-200
done
