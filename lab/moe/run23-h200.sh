#!/usr/bin/env bash
# Device call (one lease after run21 and lab/hybrid/run23): strata bench
# engine --only moe on main at 053e80a (its dev_warm_* rows time the CPU
# warming the next layer's predicted experts), then run22's A/B of the
# activation fused into the down's input quantization. Carry
# bin/gpu-tests.txz and bin/ab.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
timeout 420 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|warm|trial kept|moved" "$L/bench-moe.txt" | cut -c1-200 | sed -E 's/ {3,}/  /g'
bash "$(dirname "$0")/run22-h200.sh"
