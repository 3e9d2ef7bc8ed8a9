#!/usr/bin/env bash
# Device call: every GPU test of setup/gpu-tests.sh on the final tree, then
# bench cpu's 16-thread GEMV (chunked pool) and CPU-only 8b decode.
. "$(dirname "$0")/lib.sh"
timeout 330 setup/gpu-tests.sh run --no-bench >"$L/gpu-tests.txt" 2>&1
echo "gpu-tests rc=$?"; tail -15 "$L/gpu-tests.txt"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
timeout 90 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/bench-cpu.txt" 2>&1
cat "$L/bench-cpu.txt"
