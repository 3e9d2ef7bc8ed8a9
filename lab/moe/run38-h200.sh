#!/usr/bin/env bash
# Device call: mapped experts by trial, the engine's default now
# (gpu.MappedTrial: the host's way against the GPU pulling the experts it
# does not hold, at one token, once the resident experts' way is decided).
# 1. engine/gpu's TestMappedTrial and the MoE tests around it;
# 2. engine's CUDA MoE tests, which now load with the trial on;
# 3. the moe bench's dev_auto_* rows (the engine's default ways) against
#    dev_stream_* and dev_mapped_*, and the trial's decisions.
# Carry bin/gpu-tests.txz (setup/gpu-tests.sh build).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run 'Mapped|MoE|StreamPicks|Swap|Resident' -test.v -test.timeout 50s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -30
(cd engine && timeout 90 "$B/engine.test" -test.run 'MoEOnCUDA|ExpertsOn.*CUDA|DeviceExpertsFollowRoutingCUDA' -test.v -test.timeout 80s) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine.log" | grep -v -- "--- PASS.*/" | head -20
timeout 190 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
[ -s "$L/moe.json" ] && python3 lab/moe/tps.py "$L/moe.json" "default ways" | grep -E "^[a-z]|stream_decode|mapped_decode|auto|note"
grep -E "decode_tps|default ways" "$L/moe.txt" | grep -E "auto|stream_decode|mapped_decode|default" | cut -c1-200 | tail -30
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
