#!/usr/bin/env bash
# Device call on the final tree: bench engine --only moe, its rows with
# experts in device memory now decoding other tokens than the rows whose
# routing chose those experts (gputime.DecodeOptions.PromptSeed), then
# issue 20's scenarios (--only streamed,70b) once more.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 170 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$?"; grep -E "^  decode, batch|trial kept|host read" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g' | grep -v 'read rate'
rm -f $S/qwen3moe-* $S/mixtral-*
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench-hybrid.txt" 2>&1
echo "== hybrid rc=$?"; grep -E "hybrid|time per decode pass " "$L/bench-hybrid.txt" | grep -v "s\]" | cut -c1-250
