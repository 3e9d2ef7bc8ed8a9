#!/usr/bin/env bash
# Device call (not yet run): the CPU on a team of its own beside the GPU
# for the dense hybrid (gpu.Model.SetCPUTeam; run33's second half, moved
# out of run34 to keep that call under the device's 600 s): bench engine
# --only streamed twice, hybrid_team_* against hybrid_* in each run.
# Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
# The four-vector K-quant kernels (gemv.RowsPacked, written on the build
# machine): one thread in cache, then the 8b FFN at 8 tokens on every core;
# the hybrid's batch-8 plan below says whether the CPU now takes FFNs there.
(cd engine/gemv && timeout 60 "$B/engine-gemv.test" -test.run XXX -test.bench RowsPacked -test.benchtime 1s) >"$L/packed.txt" 2>&1
echo "== packed rc=$?"; grep Benchmark "$L/packed.txt" | awk '{print $1, $5, $6}'
(cd engine/model && timeout 60 "$B/engine-model.test" -test.run XXX -test.bench 'BenchmarkFFN$' -test.benchtime 2s) >"$L/ffn.txt" 2>&1
echo "== ffn rc=$?"; grep Benchmark "$L/ffn.txt"
for i in 1 2; do
	timeout 250 "$B/strata" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >"$L/hybrid-$i.txt" 2>&1
	echo "== hybrid $i rc=$? at ${SECONDS}s"; grep -E "hybrid(_team)? ?(decode|time per decode pass)|team|batch 8 plan" "$L/hybrid-$i.txt" | grep -v "s\]" | cut -c1-160
done
