#!/usr/bin/env bash
# Device call, on the machine run3-h200.sh warmed: `strata bench engine
# --only moe` (batch 1 and 8, the served decode of 512 tokens) against the
# llama.cpp figures run3 measured on this host (/dev/shm/peers-host.json).
# Carry bin/gpu-tests.txz (strata alone is enough).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
[ -f $S/peers-host.json ] || python3 lab/peers/peersfile.py "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" lab/peers/run3/llama-*.txt >$S/peers-host.json || { echo "no $S/peers-host.json: run run3-h200.sh on this machine first"; exit 2; }
timeout 560 "$B/strata" bench engine --synth-dir $S --only moe --moe-served 512 --peers $S/peers-host.json >"$L/bench-moe.txt" 2>&1
echo "== bench rc=$? at ${SECONDS}s"; grep -vE "^\[" "$L/bench-moe.txt" | grep -E "tok/s|hit|goals|model:|served" | cut -c1-230
