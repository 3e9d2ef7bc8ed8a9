#!/usr/bin/env bash
# (The trial's tree, 84a5bcb: the whole-layer placement this measured is deleted;
# lab/hybrid/NOTES.md, "Whole layers on the CPU", has the figures.)
# Device call: the hybrid tests of engine/gpu, then `bench engine --only
# streamed` (the 8b half) three times and --only 70b once, each timing
# the plan that may put whole layers on the CPU against the same model
# with the CPU kept to FFNs (gpu.Hybrid's FFNOnly) in the same run (rows
# hybrid_whole_vs_ffn_b1 and _b8). Carry bin/gpu-tests.txz (engine-gpu.test
# and strata).
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'Hybrid|ForwardExit|PlanPass|SequenceCopy' -test.v >"$L/gpu-tests.txt" 2>&1)
echo "== tests rc=$? at ${SECONDS}s"; grep -E '^(--- FAIL|ok|FAIL|panic)' "$L/gpu-tests.txt" | head
for i in 1 2 3; do
	timeout 150 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/streamed-$i.txt" 2>&1
	echo "== streamed $i rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass  )|in the timed|FFNs and" "$L/streamed-$i.txt" | cut -c1-300
done
timeout 300 "$B/strata" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json >"$L/70b.txt" 2>&1
echo "== 70b rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass  )|in the timed|FFNs and" "$L/70b.txt" | cut -c1-300
rm -f $S/llama-70b-*
