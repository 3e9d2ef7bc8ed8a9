#!/usr/bin/env bash
# Device call on main after the MoE trial merged: the host's read probe
# and the 8b CPU-only decode (bench cpu), then issue 20's scenarios (bench
# engine --only streamed,70b), to see the combined-link ratio on a lease
# whose host memory reads faster than PCIe and the CPU together.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
timeout 50 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu.txt" 2>&1
echo "== cpu rc=$?"; grep -E "read|^ +16 |decode" "$L/cpu.txt" | head -8
nproc; lscpu | grep -E "Model name|Socket|NUMA node|L3" 
timeout 300 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench.txt" 2>&1
echo "== bench rc=$?"; grep -E "hybrid|H2D during|time per decode pass " "$L/bench.txt" | grep -v "s\]" | cut -c1-330
