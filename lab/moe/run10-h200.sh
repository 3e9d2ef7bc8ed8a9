#!/usr/bin/env bash
# Device call for branch moe-downs (not yet run): kernels' TestGEMVEach and
# the engine/gpu expert tests, then bench engine --only moe with this tree
# and with main's binary (bin/ab/strata-old) in one lease: at one token
# the downs' inputs quantized in one launch (kernels.GEMVEach), one launch
# an expert's down where GEMV takes two.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd kernels && timeout 60 "$B/kernels.test" -test.run 'GEMVEach|QuantizeHeld|NormQ' -test.v -test.timeout 5m) >"$L/kernels.log" 2>&1
echo "== kernels rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/kernels.log" | head
(cd engine/gpu && timeout 120 "$B/engine-gpu.test" -test.run 'MoE|ExpertTrial|SetResidentExperts' -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
for v in new old; do
	bin=$B/strata
	[ $v != old ] || bin=$PWD/bin/ab/strata-old
	timeout 170 "$bin" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json >"$L/bench-moe-$v.txt" 2>&1
	echo "== moe $v rc=$?"; grep -E "^  decode, batch|trial kept" "$L/bench-moe-$v.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
done
