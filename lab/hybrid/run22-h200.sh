#!/usr/bin/env bash
# Device call: the 8b half's hybrid pass laid out layer by layer (bench
# engine --only streamed --timeline), to see where a pass loses against
# the combined-link limit: copy gaps, compute waits, hand-overs.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json >"$L/bench.txt" 2>&1
echo "== bench rc=$?"; grep -E "hybrid|timeline" "$L/bench.txt" | grep -v "s\]" | cut -c1-200
