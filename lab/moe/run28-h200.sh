#!/usr/bin/env bash
# Device call: strata bench engine --only moe with the CPU's threads held
# polling through each pass (gpu.Model.SetCPUHold): dev_stream_hold_*
# beside dev_stream_* (picks over PCIe, not held) and dev_* at batch 1, then
# BenchmarkMoEFFNGap (the CPU's call after idle gaps, held and not).
# Its GPU tests first (TestStreamPicks, TestCPUHold). Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
# First the picks over PCIe with the experts pinned a run of pages at a
# time (cudadrv.Ctx.HostRegisterRanges, new since run27) and the hold.
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'StreamPicks|CPUHold|MoE' -test.v -test.timeout 90s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head
timeout 420 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|over PCIe|fixed cost" "$L/bench-moe.txt" | cut -c1-260 | sed -E 's/ {3,}/  /g'
# The hold's effect on the CPU's call alone: one pick after idle gaps,
# held and not (engine/model's BenchmarkMoEFFNGap), 16 threads.
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run XXX -test.bench 'MoEFFNGap' -test.benchtime 2000x -test.cpu 16) >"$L/gap.log" 2>&1
echo "== gap rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/gap.log" | sed -E 's/ +/ /g'
