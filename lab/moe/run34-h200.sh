#!/usr/bin/env bash
# Device call (not yet run): experts read in place over PCIe by the GPU's
# kernels (engine/gpu/moemapped.go: SetMappedExperts, every expert the
# device does not hold; SetPicksInPlace, the pick stream's share only, no
# copies before the kernels), picks shared by their FFN width
# (SetSplitPicks: copied, the down's columns by a 2D copy, or read in
# place), and the CPU team of run33 (never run: no device that session).
# 1. the host: processors and load (run30/31 got slow or shared hosts);
# 2. engine/gpu's tests of them (Mapped, InPlace, Split: the GPU's part of
#    a pick a view of its down's columns; CPUTeam) and of what they touch
#    (the pick stream shares the mapped pinning; swaps write mapped
#    entries);
# 3. kernels' TestMoEPicked* (the down over a view of its columns) and
#    BenchmarkMoEPickedMapped: the picked kernels reading their experts
#    from device memory and in place from host memory, against a pinned
#    copy's rate: do kernels keep PCIe as busy as the copy engine?
# 4. bench cpu from memory, AVX2 against AVX-512, at 1 and 16 threads: the
#    new AVX-512 kernels (INT8Row, F16, BF16) and the AVX2 ones' prefetch,
#    and Q8_0's AVX-512 kernel (a tie with AVX2 on the build machine);
# 5. bench engine --only moe: dev_mapped_* (vs dev_stream_* and dev_*),
#    dev_split_* (vs dev_stream_*), dev_inplace_* (split too, vs
#    dev_split_*), dev_stream_team_* (vs dev_stream_*).
# The timeouts add up to under the device's 600 s a call; the hybrid's
# team rows are run35's. Carry bin/gpu-tests.txz (setup/gpu-tests.sh build).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd kernels/cudadrv && timeout 20 "$B/kernels-cudadrv.test" -test.run 'CopyHtoD2D|CopiesAndPinned' -test.v) >"$L/cudadrv.log" 2>&1
echo "== cudadrv rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|panic" "$L/cudadrv.log"
(cd engine/gpu && timeout 110 "$B/engine-gpu.test" -test.run 'Mapped|InPlace|Split|CPUTeam|StreamPicks|MoE|Swap|Resident' -test.v -test.timeout 100s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -30
(cd kernels && timeout 80 "$B/kernels.test" -test.run 'MoEPicked' -test.bench MoEPickedMapped -test.benchtime 1x -test.v) >"$L/kernels-mapped.log" 2>&1
echo "== kernels mapped rc=$? at ${SECONDS}s"; grep -E "GB/s|FAIL|panic" "$L/kernels-mapped.log" | cut -c1-220
for impl in avx2 avx512; do
	timeout 40 "$B/strata" bench cpu --threads 1,16 --only Q8_0,Q4_0,INT8_ROW,F16,BF16,Q4_K --size 4GiB --weights 2GiB --impl $impl -q >"$L/cpu-$impl.txt" 2>&1
	echo "== bench cpu $impl rc=$? at ${SECONDS}s"; grep -E "^ +(Q|INT|F|BF)|^ +(1|16) " "$L/cpu-$impl.txt"
done
timeout 300 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
python3 lab/moe/tps.py "$L/moe.json" "read in place" "FFN width"
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
