#!/usr/bin/env bash
# Device call: the placement of experts in device memory read from a
# calibration prefill (8 x 64 fresh prompt tokens) instead of the timed
# rows' own counts, with and without a CPU layer's fixed cost
# (dev_* against dev_use_*), strata bench engine --only moe; peer ratios
# to docs/peers-h200.json's figures of another lease.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 400 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch|trial kept|whole layers|CPU busy" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
