#!/usr/bin/env bash
# Device call: three workpools in BenchmarkMoEFFNGap (16 threads, a call
# after idle gaps), A B C A B C: A a bell a sleeper, the workers a small
# step leaves out sleeping at once (bin/ab.txz's ab/model-A.test); B
# those workers polling through the spin (ab/model-B.test); C B with one
# bell for every sleeper, rung once (bin/gpu-tests, the working tree).
# First the GPU tests on C, then a CPU profile of C's benchmark, then
# bench engine --only moe on C as far as the device time allows. Carry
# bin/gpu-tests.txz and bin/ab.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
A=$PWD/bin/ab
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'StreamPicks|MoE|Hybrid' -test.v -test.timeout 90s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -12
for v in A1:$A/model-A.test B1:$A/model-B.test C1:$B/engine-model.test A2:$A/model-A.test B2:$A/model-B.test C2:$B/engine-model.test; do
	n=${v%%:*} t=${v#*:}
	echo "== $n" >>"$L/gap.log"
	(cd engine/model && timeout 60 "$t" -test.run XXX -test.bench 'MoEFFNGap' -test.benchtime 2000x -test.cpu 16) >>"$L/gap.log" 2>&1
	echo "== gap $n rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/gap.log" | tail -3 | sed -E 's/ +/ /g'
done
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run XXX -test.bench 'MoEFFNGap/.*/gap(0s|500)' -test.benchtime 3000x -test.cpu 16 -test.cpuprofile "$L/cpu.prof") >"$L/prof.log" 2>&1
echo "== prof rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/prof.log" | sed -E 's/ +/ /g'
timeout 230 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|^\[ *[0-9.]+s\] \[moe" "$L/moe.txt" | cut -c1-120 | sed -E 's/ {3,}/  /g'
