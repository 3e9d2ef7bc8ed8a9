#!/usr/bin/env bash
# Device call: issue 20's figures in one lease, on the tree that closes it
# (run16's steps): bench cpu (Q4_K and Q6_K GEMV against the memory read
# probe, 16 threads; the 8b's CPU-only decode), then bench engine --only
# streamed,70b (the 8b half and the 70b in 24 GiB, batch 1 and 8, each
# pass against its combined-link limit) with the H200 peers file. Carry
# bin/gpu-tests.txz.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
timeout 60 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu.txt" 2>&1
echo "== cpu rc=$? at ${SECONDS}s"; grep -E "^ +16 |Q4_K|Q6_K|decode" "$L/cpu.txt" | cut -c1-200
timeout 400 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench-hybrid.txt" 2>&1
echo "== hybrid rc=$? at ${SECONDS}s"; grep -E "hybrid|decode, batch|goals" "$L/bench-hybrid.txt" | grep -v "%" | cut -c1-220
rm -f $S/llama-70b-*
