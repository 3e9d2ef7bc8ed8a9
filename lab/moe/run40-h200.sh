#!/usr/bin/env bash
# Device call: the GPU's share of a CPU layer's picks issued beside the
# CPU's work (workpool.Pool.RunBeside, model.FFNRoutedBeside), where the
# host issued it first and the CPU started 45-107 us a layer later
# (PickStats.Issue, run28/29/38). engine/gpu's MoE tests, then strata run
# on the synthetic Qwen3-30B-A3B Q4_K_M in 8 and 4 GiB (the engine's
# default ways: calibrated placement, the pick stream, the mapped trial),
# old (6969953) and new alternating, 256 greedy tokens each.
# Carry bin/gpu-tests.txz built with strata-old inside (see the session
# note). Part 1: tests, the model, one round; part 2: two more rounds.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
part=${1:-1}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
if [ ! -f "$Q" ]; then
	"$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
	echo "== synth at ${SECONDS}s"
fi
if [ "$part" = 1 ]; then
	(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'MoE|StreamPicks|Mapped|Picks|Swap|Resident|Hybrid' -test.v -test.timeout 190s) >"$L/engine-gpu.log" 2>&1
	echo "== engine-gpu rc=$? at ${SECONDS}s"
	grep -E -- "--- (FAIL|PASS)|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | grep -v -- "--- PASS.*/" | tr '\n' ' ' | cut -c1-1500
	echo
fi
P='The history of the printing press begins in the fifteenth century, when'
rounds="1"; [ "$part" = 2 ] && rounds="2 3"
for r in $rounds; do
	for vr in 8GiB 4GiB; do
		for v in old new; do
			bin=$B/strata; [ $v = old ] && bin=$B/strata-old
			timeout 150 "$bin" run -m "$Q" --backend cuda --vram $vr -n 256 -p "$P" --stats >"$L/out-$v-$vr-$r.txt" 2>"$L/stats-$v-$vr-$r.txt"
			echo "== r$r $vr $v rc=$? at ${SECONDS}s $(md5sum <"$L/out-$v-$vr-$r.txt" | cut -c1-8) $(grep -oE 'completion: [^;]*' "$L/stats-$v-$vr-$r.txt")"
		done
	done
done
