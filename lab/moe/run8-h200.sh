#!/usr/bin/env bash
# Device call: the experts' launches at one token (gate and up fused with
# the activation, x quantized once for every expert: kernels.QuantizeHeld)
# against the tree before (bin/ab/strata-old, a7f7540) in one lease: the
# kernels' and engine/gpu's tests of it, then bench engine --only moe with
# the new binary, then the old one.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'QuantizeHeld|NormQ|GEMVGLU' -test.timeout 5m) >"$L/kernels.log" 2>&1
echo "== kernels rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/kernels.log" | head
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'MoE|ExpertTrial|SetResidentExperts' -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
for v in new old; do
	bin=$B/strata
	[ $v != old ] || bin=$PWD/bin/ab/strata-old
	timeout 170 "$bin" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe-$v.txt" 2>&1
	echo "== moe $v rc=$?"; grep -E "^  decode, batch|trial kept|host read" "$L/bench-moe-$v.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
done
