#!/usr/bin/env bash
# One device call's worth of the hybrid and speculation measurements, on the
# H200 machine in a checkout carrying bin/gpu-tests.txz (setup/gpu-tests.sh
# build) and bin/models/ (gocode-29m xz-packed, its golden file). Logs go to
# $OUT (or ./h200-logs). Run as: LD_LIBRARY_PATH=/usr/local/nvidia/lib64 lab/hybrid/run-h200.sh
. "$(dirname "$0")/lib.sh"
G=$S/gocode-29m-f16.gguf
[ -f "$G" ] || python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' bin/models/gocode-29m-f16.gguf.xz "$G"
cp bin/models/gocode-29m-f16.golden.json "$S/"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
(cd engine/gpu && STRATA_8B_GGUF=$M8 STRATA_8B_STEPS=16 STRATA_GOCODE_GGUF=$G "$B/engine-gpu.test" -test.v -test.run 'Hybrid|Gocode|8B' -test.timeout 20m) >"$L/engine-gpu-hybrid.log" 2>&1
(cd engine/gemv && "$B/engine-gemv.test" -test.run XXX -test.bench 'Parallel' -test.benchtime 5x) >"$L/gemv-parallel.log" 2>&1
"$B/strata" bench cpu --model "$M8" --tokens 32 -q >"$L/bench-cpu.txt" 2>&1
"$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
grep -E -- '--- (PASS|FAIL)|^(ok|FAIL)' "$L/engine-gpu-hybrid.log" | tail -12
grep Bench "$L/gemv-parallel.log"
grep -E "CPU-only|^ +(Q4_K|Q6_K)" "$L/bench-cpu.txt"
grep -E "decode|hybrid|verify|goals" "$L/bench-engine.txt"
