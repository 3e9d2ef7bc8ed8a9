#!/usr/bin/env bash
# Device call (written without a device): what the session without one
# changed, on the H200 host.
# 1. engine/gpu's MoE tests (the review of the mapped experts ran only
#    here, where they skip);
# 2. `bench cpu` on 1 and 16 threads with the 8b: the GEMV rates, CPU-only
#    decode, and the prefill of a 512-token prompt on the AMX tile path
#    (prompt tokens; the build machine: 11 -> 33 tok/s on 2 threads);
# 3. BenchmarkRowsTiled and BenchmarkWiden on one thread of the host;
# 4. the 70b hybrid at batch 8 with the four-vector kernels (queue item 0);
# 5. the CPU's attention by blocks at a 4096-token prompt on 16 threads
#    (prefill, and decode at that length);
# 6. the stream memory operations (cudadrv's TestSignal) and what they
#    would save a CPU layer's hand-over (BenchmarkHandoffChain: the
#    engine's sync-and-launch against waits queued a layer ahead).
# Carry bin/gpu-tests.txz (setup/gpu-tests.sh build). Two calls, each
# under the 600 s a call may take: `bash lab/moe/run39-h200.sh 1` (1-3, 5,
# 6), then `... 2` (4).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
PART=${1:-1}
echo "== part $PART; host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg); $(grep -o -w -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
if [ "$PART" = 1 ]; then
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run 'Mapped|MoE|StreamPicks|Swap|Resident' -test.v -test.timeout 50s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -30
(cd kernels/cudadrv && timeout 30 "$B/kernels-cudadrv.test" -test.run 'TestSignal' -test.v) >"$L/signal.log" 2>&1
echo "== signal rc=$? at ${SECONDS}s"; grep -E -- "--- |^(ok|FAIL)" "$L/signal.log"
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run XXX -test.bench 'HandoffChain' -test.benchtime 1x -test.v) >>"$L/signal.log" 2>&1
echo "== handoff chain rc=$? at ${SECONDS}s"; grep -E "pass median|us/layer" "$L/signal.log"
(cd engine/gemv && timeout 60 "$B/engine-gemv.test" -test.run 'TestRowsTiled|TestWiden|TestAttnKernels|TestGLU' -test.v -test.bench 'RowsTiled/.*/T(8|16|64)/|Widen|BenchmarkAttn|SwiGLU' -test.benchtime 20x -test.cpu 1) >"$L/gemv-tiles.log" 2>&1
echo "== gemv tiles rc=$? at ${SECONDS}s"; grep -E "^(Benchmark|--- |ok|FAIL)|worst" "$L/gemv-tiles.log" | head -40
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || timeout 60 "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -q -o "$M8" >/dev/null 2>&1
timeout 150 "$B/strata" bench cpu --threads 1,16 --only Q4_K,Q6_K --time 1s --model "$M8" --tokens 16 --prompt 512 >"$L/bench-cpu.txt" 2>&1
echo "== bench cpu rc=$? at ${SECONDS}s"; tail -12 "$L/bench-cpu.txt"
# The attention by four-query blocks at a long prompt on 16 threads: a
# decode step has KVHeads blocks a layer (8), fewer than the threads.
timeout 120 "$B/strata" bench cpu --threads 16 --only Q4_K --time 500ms --model "$M8" --tokens 8 --prompt 4096 >"$L/bench-cpu-long.txt" 2>&1
echo "== bench cpu long rc=$? at ${SECONDS}s"; grep -E "decode|prefill" "$L/bench-cpu-long.txt"
fi
if [ "$PART" = 2 ]; then
timeout 300 "$B/strata" bench engine --synth-dir "$S" --only 70b --peers docs/peers-h200.json --json-file "$L/70b.json" >"$L/70b.txt" 2>&1
echo "== 70b rc=$? at ${SECONDS}s"; grep -E "decode|limit|streaming|plan" "$L/70b.txt" | cut -c1-180 | head -20
fi
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
