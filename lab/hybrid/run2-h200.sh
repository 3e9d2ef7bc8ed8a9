#!/usr/bin/env bash
# Device call: prefetch A/B round 2 (2048, 4096 = gpu-tests' strata, 8192,
# interleaved twice), then strata bench engine --only streamed,70b.
. "$(dirname "$0")/lib.sh"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
for r in 1 2; do
for v in pf2048:bin/ab/strata-pf2048 pf4096:$B/strata pf8192:bin/ab/strata-pf8192; do
	n=${v%%:*}-$r s=${v#*:}
	timeout 60 "$s" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu-$n.txt" 2>&1
	echo "== $n $(grep -A1 threads "$L/cpu-$n.txt" | tail -1) | $(grep -E '^  Q' "$L/cpu-$n.txt" | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ') | $(grep -o '[0-9.]* tokens/s' "$L/cpu-$n.txt")"
done
done
timeout 420 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json --acceptance 0.72 \
	--json-file "$L/bench-engine.json" >"$L/bench-engine.txt" 2>&1
echo "bench engine rc=$?"
grep -E "decode|hybrid|verify|goals|limit" "$L/bench-engine.txt" | head -40
