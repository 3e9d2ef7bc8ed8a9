#!/usr/bin/env bash
# Device call (session 58), after run55: main's served batch alone, under
# --cpuprofile, and with GOMAXPROCS=15 (the pool's steps on 15 of the 16
# CPUs, one left to the host thread's driver calls and the runtime), in
# the order main prof g15 g15 prof main. run55's profiled run read 48 GB/s
# while busy (141.9 tok/s) where the others read 37-42 (127-132): this
# says whether that was the profiler or the lease. Carry the bundle
# bin/gpu-tests.txz of run55.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-200}
i=0
for v in main prof g15 g15 prof main; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $v at ${SECONDS}s"; break; }
	i=$((i + 1))
	echo "== $v" >>"$L/served.txt"
	args=() env=()
	case $v in
	prof) args=(--cpuprofile "$L/served-$i.prof") ;;
	g15) env=(GOMAXPROCS=15) ;;
	esac
	env "${env[@]}" timeout 100 bin/ab/strata-main bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-8GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 "${args[@]}" >>"$L/served.txt" 2>&1
	echo "== $v rc=$? at ${SECONDS}s"
	tac "$L/served.txt" | sed '/^== /q' | tac | grep -E '^ +(served decode|CPU|the host|hand-overs|the CPU)' | cut -c1-44,100-124
done
