#!/usr/bin/env bash
# Device call: the device's experts moved while serving (main after
# bfcc5c7): gpu.Model.SwapResidentExperts against the same set uploaded
# (TestSwapResidentExperts, with TestSetResidentExperts and the picked
# path around it), then the engine's adapter moving them when the routing
# changes after the load (TestDeviceExpertsFollowRoutingCUDA) and the
# calibration's placement test beside it. Carry bin/gpu-tests.txz
# (setup/gpu-tests.sh build).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'SwapResidentExperts|SetResidentExperts|MoEPicked' -test.v -test.timeout 2m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic|moeswap_test.go" "$L/engine-gpu.log" | cut -c1-400 | head -30
(cd engine && timeout 200 "$B/engine.test" -test.run 'DeviceExpertsFollowRoutingCUDA|ExpertsOnDeviceCUDA|DeviceAdapter' -test.v -test.timeout 3m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic|experts_test.go" "$L/engine.log" | cut -c1-400 | head -30
