#!/usr/bin/env bash
# Device call for the pipeline's carried copies and the planner's run of
# passes: issue 20's bench engine scenarios (streamed, 70b) with this tree
# and with c73443a (bin/ab/strata-old) in one lease, then the engine/gpu
# suite and the engine's CUDA tests on this tree.
. "$(dirname "$0")/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >/dev/null 2>&1
for v in new old; do
	bin=$B/strata
	[ $v = new ] || bin=$PWD/bin/ab/strata-old
	timeout 170 "$bin" bench engine --synth-dir $S --only streamed,70b --peers docs/peers-h200.json >"$L/bench-$v.txt" 2>&1
	echo "== $v rc=$?"; grep -E "hybrid|decode, batch 1 |time per decode pass " "$L/bench-$v.txt" | grep -v "%" | cut -c1-220
done
rm -f $S/llama-70b-*
(cd engine/gpu && STRATA_8B_GGUF=$M8 STRATA_8B_STEPS=16 timeout 150 "$B/engine-gpu.test" -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
(cd engine && STRATA_8B_GGUF=$M8 timeout 100 "$B/engine.test" -test.run 'CUDA|Greedy|OnGPU' -test.timeout 5m) >"$L/engine.log" 2>&1
echo "== engine rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head
