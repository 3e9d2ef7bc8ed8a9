#!/usr/bin/env bash
# Device call: issue 25's checks on a GPU. engine's CUDA tests of HF
# directories (TestCUDAHFDirectory, with the 128-expert tiny-128 shape's
# transformers golden) and of failing expert reads (TestExpertsOnStorageCUDA),
# then `strata bench engine --only moe` (own routing, no served decode)
# for the counted expert bytes moved per token beside the expected ones
# (rows moved_*). Carry bin/gpu-tests.txz (engine.test and strata).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine && timeout 240 "$B/engine.test" -test.run 'TestCUDAHFDirectory|TestExpertsOnStorageCUDA' -test.v -test.timeout 4m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "^(--- |    --- )|^(ok|FAIL|PASS)|panic|NMSE" "$L/engine.log" | cut -c1-200 | head -30
timeout 480 "$B/strata" bench engine --synth-dir $S --only moe --moe-zipf 0 --moe-served 0 >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"; grep -E "decode, batch|routed experts hold|read per token|moved per token" "$L/bench-moe.txt" | cut -c1-230
