#!/usr/bin/env bash
# Device call (session 58): run54's A/B with the workers' spin in place of
# the 3K slots. The served batch of Qwen3-30B-A3B at 8 GiB, ABCDDCBA in
# one lease, over ab/strata-main (main, 50383c6's code: the work beside a
# routed call in its first step of products, 2K slots), ab/strata-s4k
# (main with streamSlots 4K), ab/strata-spin (main with workpool's
# DefaultSpin 1 ms for 200 us: a batch layer's hand-over, ~0.24 ms by
# run53's shares, outlasts the 200 us spin, so the CPU's threads may
# sleep before most layers and wake by system calls) and ab/strata-old
# (9e9f3af, the old beside rule). Then BenchmarkMoEFFNGap's batch8 (after
# no gap and after a 250 us one) and BenchmarkMoEFFN's third/T8 on the
# host, then main under --cpuprofile (go tool pprof -top here). Stops
# starting runs past LIMIT (default 470) seconds. Carry bin/gpu-tests.txz
# holding gpu-tests/ and ab/ (one bundle: two passed the carry limit).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-470}
for v in main s4k spin old old spin s4k main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	echo "== $v" >>"$L/served.txt"
	timeout 100 bin/ab/strata-$v bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 >>"$L/served.txt" 2>&1
	echo "== $v rc=$? at ${SECONDS}s"
	tac "$L/served.txt" | sed '/^== /q' | tac | grep -E '^ +(served decode|of the other|CPU|the host|hand-overs|batch layers|the CPU)' | cut -c1-44,100-124
	tac "$L/served.txt" | sed '/^== /q' | grep -o "the CPU's threads: .*" 
	if [ "$v" = s4k ] && [ "$SECONDS" -lt 150 ]; then
		(cd engine/model && timeout 60 "$B/engine-model.test" -test.run '^$' -test.bench 'MoEFFNGap/qwen3moe-30b/batch8' -test.benchtime 2s &&
			timeout 30 "$B/engine-model.test" -test.run '^$' -test.bench 'MoEFFN$/./third/T8' -test.benchtime 1s) >"$L/gap.txt" 2>&1
		echo "== gap rc=$? at ${SECONDS}s"; grep -E '^Benchmark' "$L/gap.txt"
	fi
done
if [ "$SECONDS" -lt "$LIMIT" ]; then
	timeout 100 bin/ab/strata-main bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 --cpuprofile "$L/served-main.prof" >"$L/profiled.txt" 2>&1
	echo "== profiled rc=$? at ${SECONDS}s"; grep -E '^ +served decode' "$L/profiled.txt" | cut -c1-44,100-124
fi
