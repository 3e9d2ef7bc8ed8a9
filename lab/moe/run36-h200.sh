#!/usr/bin/env bash
# Device call: run34's second sample and its fixes. run34's lease was noisy
# (the same configuration, every pick on the CPU, gave 18.4 to 32.0 tok/s
# in the 4 GiB rows), so the moe bench runs again with the same binary;
# MoEStats now counts the routes of a pass's last layers (TestMapped*
# failed on that count alone), and BenchmarkMoEPickedMapped reserves the
# scratch the picked kernels need (it refused Qwen's shape and then hung
# on a skip made on the device goroutine). Also the host's CPU flags: AMX
# decides whether tile kernels for the CPU's batched products are worth
# writing. Carry bin/gpu-tests.txz (setup/gpu-tests.sh build).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 "model name" /proc/cpuinfo
grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512_bf16\|avx512_fp16\|avx_vnni' /proc/cpuinfo | sort | uniq -c
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run 'Mapped' -test.v -test.timeout 50s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS|SKIP)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head -20
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'MoEPicked' -test.bench MoEPickedMapped -test.benchtime 1x -test.v) >"$L/kernels-mapped.log" 2>&1
echo "== kernels mapped rc=$? at ${SECONDS}s"; grep -E "GB/s|FAIL|panic|refuse" "$L/kernels-mapped.log" | cut -c1-250
timeout 330 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
python3 lab/moe/tps.py "$L/moe.json" "read in place" "FFN width"
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
