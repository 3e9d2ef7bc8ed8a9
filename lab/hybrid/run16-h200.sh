#!/usr/bin/env bash
# Device call on the tree with internal/workpool: issue 20's figures in one
# lease (bench cpu: GEMV ÷ memory read and the 8b CPU-only decode; bench
# engine --only streamed,70b), the hybrid and MoE GPU tests, then the MoE
# scenario on the model's own routing (issue 25's CPU expert rate).
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
timeout 50 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu.txt" 2>&1
echo "== cpu rc=$?"; grep -E "^ +16 |Q4_K|Q6_K|decode" "$L/cpu.txt"
timeout 230 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench-hybrid.txt" 2>&1
echo "== hybrid rc=$?"; grep -E "hybrid|decode, batch 1 |goals" "$L/bench-hybrid.txt" | grep -v "%" | cut -c1-200
(cd engine/gpu && STRATA_8B_GGUF=$M8 STRATA_8B_STEPS=8 timeout 60 "$B/engine-gpu.test" -test.run 'Hybrid|MoE' -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
rm -f $S/llama-70b-*
timeout 200 "$B/strata" bench engine --synth-dir "$S" --only moe --moe-zipf 0 --peers docs/peers-h200.json >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$?"; grep -E "^\[moe|decode, batch|expert read rate" "$L/bench-moe.txt" | cut -c1-160
