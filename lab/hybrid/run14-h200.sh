#!/usr/bin/env bash
# Device call: the GPU test packages without the 8b shapes (after run13's
# TestExpertsOnDeviceCUDA failure, which was the test comparing the first
# seed's GGUF with the stacked pool's reference), then bench engine --only
# streamed (8b half: hybrid vs streaming).
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
T=$L/t; mkdir -p $T
s() { n=$1 d=$2 to=$3; shift 3; (cd $d && timeout $to "$@") >"$T/$n.log" 2>&1; echo "== $n rc=$? pass=$(grep -c -- '--- PASS' $T/$n.log)"; grep -E -- "--- FAIL|^FAIL|panic" "$T/$n.log" | head -8; }
s kernels kernels 70 "$B/kernels.test"
s cudadrv kernels/cudadrv 30 "$B/kernels-cudadrv.test" -test.v
s engine-gpu engine/gpu 100 "$B/engine-gpu.test" -test.v
s engine engine 100 "$B/engine.test" -test.v -test.run 'CUDA|OnGPU|Greedy'
s enginebench internal/bench/enginebench 60 "$B/internal-bench-enginebench.test" -test.v
timeout 150 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$T/bench-streamed.txt" 2>&1
echo "bench rc=$?"; grep -E "hybrid|decode, batch 1 |goals" "$T/bench-streamed.txt" | cut -c1-230
tar czf $L/logs.tgz -C $L t && rm -rf $T
