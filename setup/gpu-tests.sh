#!/usr/bin/env bash
# The GPU half of strata's tests, which CI cannot run (it has no GPU):
# every test of kernels/, kernels/cudadrv, engine/gpu and engine's CUDA tests
# against the CPU reference, the 8B-shape fidelity test, the benchmarks'
# timing library (internal/bench/gputime), engine/gemv's CPU kernels on the
# GPU host's CPU, the bench's own tests (its moe scenario on tiny shapes),
# and `strata bench engine` (with the peer
# figures of docs/peers-h200.json). Built on any machine with Go, run on a GPU host
# that needs no Go:
#
#   setup/gpu-tests.sh build            # here: cross-builds bin/gpu-tests.txz
#   setup/gpu-tests.sh run [OPTIONS]    # there, in a checkout (the tests read
#                                       # their testdata/), after copying the
#                                       # tarball to bin/
#
# run options:
#   --no-bench       tests only
#   --bench-only S   only `strata bench engine --only S`
# The bench compares with the peer figures of docs/peers-h200.json (the
# device machine's; docs/performance.md holds the current table).
# The test binaries stay in bin/gpu-tests/ after a run, for single tests or
# benchmarks by hand (cd into the package, run its .test with -test.run or
# -test.bench); engine/model's is there for its CPU benchmarks on the GPU
# host's CPU (no step runs it: CI runs its tests). The standalone kernel
# sweeps are lab tools, not steps of this script: lab/README.md says how
# to build them.
# Environment: LOGS (default gpu-logs/, or $OUT where set) receives one log
# per step; SYNTH (default /dev/shm) holds the synthetic 8b/70b models,
# written on first use (~3 s and ~26 s; ~70 GiB for every bench scenario),
# and the real gocode-29m model when bin/models/ carries it (xz -6 of
# ../shared/models/gocode-29m-f16.gguf, with its golden file);
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
	for p in kernels kernels/cudadrv engine/gpu engine engine/gemv engine/model internal/bench/gputime internal/bench/enginebench; do
		"$GO" test -c -ldflags='-s -w' -o "bin/gpu-tests/$(echo "$p" | tr / -).test" "./$p"
	done
	"$GO" build -ldflags='-s -w' -o bin/gpu-tests/strata ./tools/strata
	# xz with a dictionary wider than one binary: the six share most of
	# their bytes (the embedded PTX and cubins), so the tarball is ~7 MB
	# where gzip made ~31 (the device tool carries at most 64 MiB).
	rm -f bin/gpu-tests.tgz
	tar cf - -C bin gpu-tests | xz -T0 -9 --lzma2=dict=192MiB >bin/gpu-tests.txz
	rm -r bin/gpu-tests
	echo "bin/gpu-tests.txz ($(du -h bin/gpu-tests.txz | cut -f1)): copy it to bin/ of a checkout on the GPU host and run setup/gpu-tests.sh run" >&2
}

run() {
	local bench=1 only=all
	while [ $# -gt 0 ]; do
		case $1 in
		--no-bench) bench=0 ;;
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
	local failed=()
	step() { # step NAME DIR COMMAND...: runs COMMAND in DIR, logs to NAME.log
		local name=$1 dir=$2
		shift 2
		echo "== $name" >&2
		if (cd "$dir" && "$@") >"$logs/$name.log" 2>&1; then
			echo "   ok ($(grep -c -- '--- PASS' "$logs/$name.log") passed)" >&2
		else
			failed+=("$name")
			grep -E -- '--- FAIL|^FAIL|panic' "$logs/$name.log" | head -20 >&2 || tail -5 "$logs/$name.log" >&2
		fi
	}
	# The real gocode-29m model, where the checkout carries it xz-packed in
	# bin/models/ (the device tool carries 64 MiB; the F16 file is 59 MB):
	# unpacked beside the synthetic models for engine/gpu's hybrid test.
	local gocode=""
	if [ -f bin/models/gocode-29m-f16.gguf.xz ] && [ -f bin/models/gocode-29m-f16.golden.json ]; then
		gocode=$synth/gocode-29m-f16.gguf
		[ -f "$gocode" ] || python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
			bin/models/gocode-29m-f16.gguf.xz "$gocode"
		cp bin/models/gocode-29m-f16.golden.json "$synth/"
	fi
	if [ $bench != 2 ]; then
		step kernels kernels "$B/kernels.test" -test.v
		step kernels-cudadrv kernels/cudadrv "$B/kernels-cudadrv.test" -test.v
		step engine-gpu engine/gpu env STRATA_8B_GGUF="$synth/llama-8b-q4_k_m-seed1.gguf" STRATA_8B_STEPS=64 STRATA_GOCODE_GGUF="$gocode" \
			"$B/engine-gpu.test" -test.v -test.timeout 30m
		# STRATA_8B_GGUF: TestCUDATierCNVMe also streams the 8b shape's tier C
		# through the userspace NVMe driver over the software controller.
		step engine engine env STRATA_8B_GGUF="$synth/llama-8b-q4_k_m-seed1.gguf" \
			"$B/engine.test" -test.v -test.run 'CUDA|RealDriver|Greedy|OnGPU' -test.timeout 30m
		step bench-gputime internal/bench/gputime "$B/internal-bench-gputime.test" -test.v
		# The bench's own tests: TestMoEOnGPU runs the moe scenario on the
		# tiny shapes in seconds.
		step bench-enginebench internal/bench/enginebench "$B/internal-bench-enginebench.test" -test.v
		step gemv engine/gemv "$B/engine-gemv.test" -test.v
	fi
	if [ $bench != 0 ]; then
		step bench-engine . "$B/strata" bench engine --synth-dir "$synth" --only "$only" \
			--peers docs/peers-h200.json --json-file "$logs/bench-engine.json"
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
*) echo "usage: setup/gpu-tests.sh build | run [--no-bench] [--bench-only SCENARIOS]" >&2; exit 2 ;;
esac
