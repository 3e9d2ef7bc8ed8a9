#!/usr/bin/env bash
# Device call: the placements of experts in device memory compared at
# batch 1 on the model's own routing (--moe-zipf 0): the plan's (a CPU
# layer's fixed cost weighed, dev_*), by use per byte alone (dev_use_*)
# and whole layers first (dev_layers_*, llama.cpp's --n-cpu-moe shape),
# each from a calibration prefill of 8 x 64 fresh tokens.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 400 "$B/strata" bench engine --synth-dir "$S" --only moe --moe-zipf 0 --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch|trial kept|whole layers|CPU busy" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
