#!/usr/bin/env bash
# Device call on the final tree (run19-h200.sh again, after the meta upload became a kernel): bench engine --only streamed,70b (issue
# 20's scenarios), then the engine/gpu suite and the engine's CUDA tests.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench.txt" 2>&1
echo "== bench rc=$?"; grep -E "hybrid|H2D during|time per decode pass " "$L/bench.txt" | grep -v "s\]" | cut -c1-330
rm -f $S/llama-70b-*
(cd engine/gpu && STRATA_8B_GGUF=$M8 STRATA_8B_STEPS=16 timeout 170 "$B/engine-gpu.test" -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
(cd engine && STRATA_8B_GGUF=$M8 timeout 100 "$B/engine.test" -test.run 'CUDA|Greedy|OnGPU' -test.timeout 5m) >"$L/engine.log" 2>&1
echo "== engine rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head
