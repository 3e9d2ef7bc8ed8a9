#!/usr/bin/env bash
# Device call: bench engine --only streamed,70b (hybrid with re-planning,
# verify passes) and the full bench cpu (every kind, 1..16 threads).
. "$(dirname "$0")/lib.sh"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
timeout 400 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "hybrid|goals" "$L/bench-engine.txt" | cut -c1-250
timeout 150 "$B/strata" bench cpu --model "$M8" --tokens 32 -q >"$L/bench-cpu.txt" 2>&1
cat "$L/bench-cpu.txt"
