#!/usr/bin/env bash
# Device call: the compute team's sleepers on futex bells (hostcpu.Bell,
# new) against channels (bin/ab.txz: strata-old and model-old.test, built
# from the commit before). The GPU tests on the new pool, then
# BenchmarkMoEFFNGap old/new (a call after idle gaps, held and not), the
# hybrid rows old/new/old/new, and the MoE scenario old then new.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'StreamPicks|CPUHold|MoE|Hybrid' -test.v -test.timeout 90s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head
for v in old:bin/ab/model-old.test new:$B/engine-model.test; do
	n=${v%%:*} t=${v#*:}
	(cd engine/model && timeout 60 "$t" -test.run XXX -test.bench 'MoEFFNGap' -test.benchtime 2000x -test.cpu 16) >"$L/gap-$n.log" 2>&1
	echo "== gap $n rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/gap-$n.log" | sed -E 's/ +/ /g'
done
for v in old1:bin/ab/strata-old new1:$B/strata old2:bin/ab/strata-old new2:$B/strata; do
	n=${v%%:*} s=${v#*:}
	timeout 200 "$s" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/hybrid-$n.txt" 2>&1
	echo "== hybrid $n rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass )" "$L/hybrid-$n.txt" | grep -v "s\]" | cut -c1-150
done
for v in old:bin/ab/strata-old new:$B/strata; do
	n=${v%%:*} s=${v#*:}
	timeout 280 "$s" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe-$n.json" >"$L/moe-$n.txt" 2>&1
	echo "== moe $n rc=$? at ${SECONDS}s"
	grep -E "^  decode, batch 1|^    CPU busy" "$L/moe-$n.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
done
