#!/usr/bin/env bash
# The GPU half of strata's tests, which CI cannot run (it has no GPU):
# every test of kernels/, kernels/cudadrv, engine/gpu and engine's CUDA tests
# against the CPU reference, the 8B-shape fidelity test, the benchmarks'
# timing library (bench/gputime), and `strata bench engine` (with the peer
# figures of docs/peers-h200.json). Built on any machine with Go, run on a GPU host
# that needs no Go:
#
#   setup/gpu-tests.sh build            # here: cross-builds bin/gpu-tests.txz
#   setup/gpu-tests.sh run [OPTIONS]    # there, in a checkout (the tests read
#                                       # their testdata/), after copying the
#                                       # tarball to bin/
#
# run options:
#   --float-gemv     run every GPU test and the bench with kernels' float
#                    decode GEMVs (STRATA_FAST_GEMV=0, bench --float-gemv)
#                    instead of the default integer ones
#   --plain-q6k      run every GPU test and the bench with the resident
#                    layers' Q6_K matrices as in the file, not re-laid
#                    (STRATA_Q6KA=0, bench --plain-q6k; kernels.Q6KA is
#                    the default)
#   --no-bench       tests only
#   --bench-only S   only `strata bench engine --only S`
#   --kernel-bench   also kernels' BenchmarkGEMVQWarps (integer GEMV launches
#                    per 8b decode shape and warps per block, the Q6_K staged
#                    variant; kernels/NOTES.md), after the tests
#   --sweep MODE     also kernels/testdata/stage-sweep.cu in MODE (its header
#                    lists them; "all" for every staged variant), built into
#                    the tarball where the build machine has nvcc
#   --profile        also Nsight Compute (ncu, where the host has it) on the
#                    sweep's prof mode with PROF=q4: the step's Q4_K GEMV
#                    kernels once each, stall reasons, occupancy, memory
#                    (kernels/NOTES.md asks for it next), into ncu-q4k.log
# Environment: LOGS (default gpu-logs/, or $OUT where set) receives one log
# per step; SYNTH (default /dev/shm) holds the synthetic 8b/70b models,
# written on first use (~3 s and ~26 s; ~70 GiB for every bench scenario);
# LD_LIBRARY_PATH should reach libcuda.so.1. The exit status is non-zero if
# any step failed; the summary names them.
set -uo pipefail
cd "$(dirname "$0")/.."

build() {
	set -e
	local GO
	GO=$(setup/deps.sh)
	export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0
	mkdir -p bin/gpu-tests
	for p in kernels kernels/cudadrv engine/gpu engine bench/gputime; do
		"$GO" test -c -ldflags='-s -w' -o "bin/gpu-tests/$(echo "$p" | tr / -).test" "./$p"
	done
	"$GO" build -ldflags='-s -w' -o bin/gpu-tests/strata ./tools/strata
	if command -v nvcc >/dev/null; then # the standalone GEMV sweep (kernels/NOTES.md)
		(cd kernels/testdata && nvcc -O3 -std=c++17 -arch=sm_90 -I.. -o ../../bin/gpu-tests/stage-sweep stage-sweep.cu)
	fi
	# xz with a dictionary wider than one binary: the six share most of
	# their bytes (the embedded PTX and cubins), so the tarball is ~7 MB
	# where gzip made ~31 (the device tool carries at most 64 MiB).
	rm -f bin/gpu-tests.tgz
	tar cf - -C bin gpu-tests | xz -T0 -9 --lzma2=dict=192MiB >bin/gpu-tests.txz
	rm -r bin/gpu-tests
	echo "bin/gpu-tests.txz ($(du -h bin/gpu-tests.txz | cut -f1)): copy it to bin/ of a checkout on the GPU host and run setup/gpu-tests.sh run" >&2
}

run() {
	local float=0 plain6=0 bench=1 only=all kbench=0 sweep= profile=0
	while [ $# -gt 0 ]; do
		case $1 in
		--float-gemv) float=1 ;;
		--plain-q6k) plain6=1 ;;
		--no-bench) bench=0 ;;
		--kernel-bench) kbench=1 ;;
		--profile) profile=1 ;;
		--sweep) sweep=${2:?--sweep needs a mode}; shift ;;
		--bench-only) bench=2 only=${2:?--bench-only needs scenarios}; shift ;;
		*) echo "gpu-tests.sh run: unknown option $1" >&2; return 2 ;;
		esac
		shift
	done
	[ -f bin/gpu-tests.txz ] || { echo "gpu-tests.sh run: no bin/gpu-tests.txz (setup/gpu-tests.sh build first)" >&2; return 2; }
	if command -v xz >/dev/null; then
		tar xJf bin/gpu-tests.txz -C bin || return 2
	else # python3's lzma where the host has no xz
		python3 -c 'import tarfile; tarfile.open("bin/gpu-tests.txz", "r:xz").extractall("bin")' || return 2
	fi
	local B=$PWD/bin/gpu-tests logs=${LOGS:-${OUT:-gpu-logs}} synth=${SYNTH:-/dev/shm}
	mkdir -p "$logs"
	local failed=() fast=() benchflag=()
	if [ $float = 1 ]; then
		fast=(STRATA_FAST_GEMV=0)
		benchflag=(--float-gemv)
	fi
	if [ $plain6 = 1 ]; then
		fast+=(STRATA_Q6KA=0)
		benchflag+=(--plain-q6k)
	fi
	step() { # step NAME DIR COMMAND...: runs COMMAND in DIR, logs to NAME.log
		local name=$1 dir=$2
		shift 2
		echo "== $name" >&2
		if (cd "$dir" && env "${fast[@]}" "$@") >"$logs/$name.log" 2>&1; then
			echo "   ok ($(grep -c -- '--- PASS' "$logs/$name.log") passed)" >&2
		else
			failed+=("$name")
			grep -E -- '--- FAIL|^FAIL|panic' "$logs/$name.log" | head -20 >&2 || tail -5 "$logs/$name.log" >&2
		fi
	}
	if [ $bench != 2 ]; then
		step kernels kernels "$B/kernels.test" -test.v
		step kernels-cudadrv kernels/cudadrv "$B/kernels-cudadrv.test" -test.v
		step engine-gpu engine/gpu env STRATA_8B_GGUF="$synth/llama-8b-q4_k_m-seed1.gguf" STRATA_8B_STEPS=64 \
			"$B/engine-gpu.test" -test.v -test.timeout 30m
		step engine engine "$B/engine.test" -test.v -test.run 'CUDA|RealDriver|Greedy'
		step bench-gputime bench/gputime "$B/bench-gputime.test" -test.v
	fi
	if [ $kbench = 1 ]; then
		step kernels-bench kernels "$B/kernels.test" -test.run XXX -test.bench GEMVQWarps -test.benchtime 1x -test.v
	fi
	if [ -n "$sweep" ]; then
		if [ -x "$B/stage-sweep" ]; then
			local m=$sweep
			[ "$m" = all ] && m=
			step "stage-sweep-$sweep" . "$B/stage-sweep" $m
		else
			echo "== stage-sweep: not in the tarball (its build machine had no nvcc)" >&2
			failed+=("stage-sweep")
		fi
	fi
	if [ $profile = 1 ]; then
		local ncu
		ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1 || true)
		if [ -x "$B/stage-sweep" ] && [ -n "$ncu" ]; then
			PROF=q4 step ncu-q4k . "$ncu" -k 'regex:gemvq_fused_1|kR' --section SpeedOfLight --section Occupancy \
				--section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
				--section SourceCounters "$B/stage-sweep" prof
		else
			echo "== ncu-q4k: needs the sweep in the tarball and ncu on this host" >&2
			failed+=("ncu-q4k")
		fi
	fi
	if [ $bench != 0 ]; then
		step bench-engine . "$B/strata" bench engine --synth-dir "$synth" --only "$only" --peers docs/peers-h200.json "${benchflag[@]}" \
			--json-file "$logs/bench-engine.json"
	fi
	if [ ${#failed[@]} -gt 0 ]; then
		echo "FAILED: ${failed[*]} (logs in $logs/)" >&2
		return 1
	fi
	echo "all GPU steps passed (logs in $logs/)" >&2
}

case ${1:-} in
build) build ;;
run) shift; run "$@" ;;
*) echo "usage: setup/gpu-tests.sh build | run [--float-gemv] [--plain-q6k] [--no-bench] [--bench-only SCENARIOS] [--kernel-bench] [--sweep MODE] [--profile]" >&2; exit 2 ;;
esac
