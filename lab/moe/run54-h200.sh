#!/usr/bin/env bash
# Device call (session 57): the served batch of Qwen3-30B-A3B at 8 GiB
# with the pick stream's staging slots at 2, 3 and 4 times a token's picks
# (bin/ab.txz: ab/strata-main is main at 50383c6, ab/strata-s3k and
# ab/strata-s4k main with streamSlots changed), and main against
# ab/strata-old (9e9f3af: the work beside a routed call taken by its first
# step of as many items as threads, the inputs' quantization included,
# where main gives it to the first step of products), ABCDDCBA in one
# lease. run53 found a quarter to a third of the batch layers' PCIe shares
# cut short by 2K slots. Then the CPU's
# share of a served batch layer alone, after no gap and after a
# hand-over's (engine/model's BenchmarkMoEFFNGap batch8), beside
# BenchmarkMoEFFN's third/T8, to set the pass's CPU rate against. Then, with
# time left, main once more under --cpuprofile (served-main.prof: where
# the host's threads go in the served batch; go tool pprof -top here).
# Stops starting runs past LIMIT (default 420) seconds. Carry
# bin/gpu-tests.txz and bin/ab.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-420}
for v in main old s4k s3k s3k s4k old main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	echo "== $v" >>"$L/served.txt"
	timeout 100 bin/ab/strata-$v bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 >>"$L/served.txt" 2>&1
	echo "== $v rc=$? at ${SECONDS}s"
	tac "$L/served.txt" | sed '/^== /q' | tac | grep -E '^ +(served decode|of the other|CPU|the host|hand-overs|batch layers)' | cut -c1-44,100-124
done
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run '^$' -test.bench 'MoEFFNGap/qwen3moe-30b/batch8' -test.benchtime 2s &&
	timeout 30 "$B/engine-model.test" -test.run '^$' -test.bench 'MoEFFN$/./third/T8' -test.benchtime 1s) >"$L/gap.txt" 2>&1
echo "== gap rc=$? at ${SECONDS}s"; grep -E '^Benchmark' "$L/gap.txt"
if [ "$SECONDS" -lt "$LIMIT" ]; then
	timeout 100 bin/ab/strata-main bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 --cpuprofile "$L/served-main.prof" >"$L/profiled.txt" 2>&1
	echo "== profiled rc=$? at ${SECONDS}s"; grep -E '^ +served decode' "$L/profiled.txt" | cut -c1-44,100-124
fi
