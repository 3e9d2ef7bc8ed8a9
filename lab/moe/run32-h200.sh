#!/usr/bin/env bash
# Device call (not yet run): the workpool's three ways on a host that is
# not oversubscribed (run31's ran one pick in 1.2 ms where others took
# 0.09), in one run. A: the workers a small step leaves out sleep at once
# (4dd3612, before 'a worker a small step leaves out keeps polling'); B: main;
# C: B with one bell for every sleeper (lab/moe/run31/one-bell.diff).
# Build here first:
#   for v in A:4dd3612 C:main+diff; do worktree, apply the diff for
#   C, go test -c ./engine/model -o bin/ab/model-$v.test, go build
#   ./tools/strata -o bin/ab/strata-$v; done
#   tar cJf bin/ab.txz -C bin ab; bash setup/gpu-tests.sh build
# Carry bin/gpu-tests.txz and bin/ab.txz. About 8 minutes: the gap
# benchmark A B C twice, the streamed rows (8b half) A B C, and the MoE
# scenario B then C (A is run29/b's "new"). At most 8 files come back.
# A's and C's model tests take main's engine/model/ffn_bench_test.go (its
# Mixtral-shaped block, where the small steps are, is newer than A; it
# builds against A's package): copy it into the worktree before building.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
A=$PWD/bin/ab
nproc >"$L/host.txt"; uptime >>"$L/host.txt"; cat /proc/loadavg >>"$L/host.txt"
for v in A1:$A/model-A.test B1:$B/engine-model.test C1:$A/model-C.test A2:$A/model-A.test B2:$B/engine-model.test C2:$A/model-C.test; do
	n=${v%%:*} t=${v#*:}
	echo "== $n" >>"$L/gap.log"
	(cd engine/model && timeout 60 "$t" -test.run XXX -test.bench 'MoEFFNGap' -test.benchtime 2000x -test.cpu 16) >>"$L/gap.log" 2>&1
	echo "== gap $n rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/gap.log" | tail -3 | sed -E 's/ +/ /g'
done
for v in A:$A/strata-A B:$B/strata C:$A/strata-C; do
	n=${v%%:*} s=${v#*:}
	echo "== $n" >>"$L/hybrid.txt"
	timeout 200 "$s" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >>"$L/hybrid.txt" 2>&1
	echo "== hybrid $n rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass )" "$L/hybrid.txt" | grep -v "s\]" | tail -3 | cut -c1-150
done
for v in B:$B/strata C:$A/strata-C; do
	n=${v%%:*} s=${v#*:}
	timeout 280 "$s" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe-$n.json" >"$L/moe-$n.txt" 2>&1
	echo "== moe $n rc=$? at ${SECONDS}s"
	grep -E "^  decode, batch 1" "$L/moe-$n.txt" | cut -c1-120 | sed -E 's/ {3,}/  /g'
done
