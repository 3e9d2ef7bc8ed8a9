#!/usr/bin/env bash
# Device call on the final tree: bench engine --only moe, its rows with
# experts in device memory now decoding other tokens than the rows whose
# routing chose those experts (gputime.DecodeOptions.PromptSeed).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 170 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$?"; grep -E "^  decode, batch|trial kept|host read" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g' | grep -v 'read rate'
