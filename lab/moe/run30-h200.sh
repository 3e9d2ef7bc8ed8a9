#!/usr/bin/env bash
# Device call: the CPU's threads woken ahead of its layers
# (gpu.Model.SetCPUWake, workpool.Pool.Wake; off by default) beside the
# same rows not woken, in one run each: the GPU tests, BenchmarkMoEFFNGap
# (a call after idle gaps, woken 50 µs ahead and not), bench engine
# --only streamed twice (hybrid_wake_*), then --only moe
# (dev_stream_wake_*). Carry bin/gpu-tests.txz. At most 8 files come back.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'StreamPicks|CPUWake|MoE|Hybrid' -test.v -test.timeout 90s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -12
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run XXX -test.bench 'MoEFFNGap' -test.benchtime 2000x -test.cpu 16) >"$L/gap.log" 2>&1
echo "== gap rc=$? at ${SECONDS}s"; grep -E "^Benchmark" "$L/gap.log" | sed -E 's/ +/ /g'
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/hybrid-$i.txt" 2>&1
	echo "== hybrid $i rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass )" "$L/hybrid-$i.txt" | grep -v "s\]" | cut -c1-150
done
timeout 280 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
python3 - "$L/moe.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]:
    print(s["variant"])
    for m in s["metrics"]:
        if m["unit"] == "tok/s" and "b8" not in m["key"]:
            r = m.get("ratio") or {}
            print("  %-42s %8.2f  %s" % (m["key"], m["value"], ("%.3fx %s" % (r["value"], r["basis"])) if r else ""))
PY
