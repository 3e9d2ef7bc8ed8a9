#!/usr/bin/env bash
# Device call: the tree with picks over PCIe on by default in the engine
# (Options.NoStreamPicks to turn it off) and the staging budgeted
# (engine.DeviceExpertBudget less gpu.PickStreamBytes): every engine/gpu
# test, then the engine's MoE and CUDA tests. Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 170 "$B/engine-gpu.test" -test.timeout 3m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head -20
(cd engine && timeout 100 "$B/engine.test" -test.run 'CUDA|Expert|MoE|Adapter' -test.timeout 2m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head -20
