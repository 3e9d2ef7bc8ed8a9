#!/usr/bin/env bash
# Device call: the mapped picks staged into device slots by the GPU
# (kernels.MoEStage, gpu.Model.SetMappedStaging) before the picked kernels
# run them. run36's BenchmarkMoEPickedMapped read host experts in place at
# 35 GB/s with 8 host picks a call, but the model's mapped layers (1-2
# host picks of 8) moved their off-device bytes at ~13.5 GB/s (Qwen 8
# GiB, 21.6 ms a pass against ~6 with every pick resident): few reads in
# flight. A copy spread over every block should keep the link busier.
# 1. kernels' TestMoEStage (bytes, entries, and the picked kernels' bits
#    against reading in place) and the benchmark's three ways per case;
# 2. engine/gpu's MoE tests after run36's deletions (the CPU team, the
#    stream's share in place), TestMappedStaging and the staged
#    TestMappedMatchesResident;
# 3. the moe bench, dev_mapstage_* against dev_mapped_*.
# Carry bin/gpu-tests.txz (setup/gpu-tests.sh build).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'MoEStage|MoEPicked' -test.bench MoEPickedMapped -test.benchtime 1x -test.v) >"$L/kernels-stage.log" 2>&1
echo "== kernels rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|host memory a call|panic" "$L/kernels-stage.log" | grep -v -- "--- PASS.*/" | cut -c1-330
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'Mapped|Split|StreamPicks|MoE|Swap|Resident|Hybrid' -test.v -test.timeout 110s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -40
timeout 330 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
python3 lab/moe/tps.py "$L/moe.json" "read in place" "staged"
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
