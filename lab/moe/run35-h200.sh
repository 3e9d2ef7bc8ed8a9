#!/usr/bin/env bash
# Device call (not yet run): the CPU on a team of its own beside the GPU
# for the dense hybrid (gpu.Model.SetCPUTeam; run33's second half, moved
# out of run34 to keep that call under the device's 600 s): bench engine
# --only streamed twice, hybrid_team_* against hybrid_* in each run.
# Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in 1 2; do
	timeout 250 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/hybrid-$i.txt" 2>&1
	echo "== hybrid $i rc=$? at ${SECONDS}s"; grep -E "hybrid(_team)? ?(decode|time per decode pass)|team" "$L/hybrid-$i.txt" | grep -v "s\]" | cut -c1-160
done
