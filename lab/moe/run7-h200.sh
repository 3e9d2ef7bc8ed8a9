#!/usr/bin/env bash
# Device call on main: the engine/gpu expert tests (the trial now in blocks,
# the GPU's way, then the CPU's) and TestHybridFidelity (the timeline's
# check), then
# bench engine --only moe on the model's own routing and on the Zipf skew,
# where the dev rows now warm up past the trial and note what it kept.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'MoE|ExpertTrial|SetResidentExperts|Choice|HybridFidelity' -test.v -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v "PASS: TestMoEOnCUDA/" | head -30
timeout 420 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$?"; grep -E "^\[moe|decode, batch|trial kept" "$L/bench-moe.txt" | cut -c1-200
