#!/usr/bin/env bash
# Device call (not yet run): the CPU beside the GPU on a team of its own
# (gpu.Model.SetCPUTeam; off by default): one thread fewer than the
# processors, so that the host thread driving the GPU finds a processor
# idle when it returns from the driver, polling 2 ms so that the team
# spans the gaps between the CPU's layers awake. run28's hold (the shared
# pool's 16 threads polling through the pass) lost 0.52-0.82x; the
# host's own work in the pass grew by ~0.23 ms a layer, which this tests.
# TestCPUTeam, then bench engine --only streamed twice (hybrid_team_*)
# and --only moe (dev_stream_team_*). Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
(cd engine/gpu && timeout 100 "$B/engine-gpu.test" -test.run 'CPUTeam|StreamPicks|MoE|Hybrid' -test.v -test.timeout 90s) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | head -12
for i in 1 2; do
	timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/hybrid-$i.txt" 2>&1
	echo "== hybrid $i rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)" "$L/hybrid-$i.txt" | grep -v "s\]" | cut -c1-150
done
timeout 300 "$B/strata" bench engine --synth-dir "$S" --only moe --peers docs/peers-h200.json --json-file "$L/moe.json" >"$L/moe.txt" 2>&1
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
