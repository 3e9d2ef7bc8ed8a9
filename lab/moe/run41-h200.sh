#!/usr/bin/env bash
# Device call: the GPU's share issued beside the CPU's work, two orders
# against the old tree (6969953, strata-old): a = 31a5062 (the sleepers
# rung, then beside: run40 gave 8 GiB 0.97x, 4 GiB 1.10x), new = the
# step published, beside, then the sleepers rung. strata run on the
# synthetic Qwen3-30B-A3B Q4_K_M in 8 and 4 GiB (two rounds, variants
# interleaved, 256 greedy tokens) and Mixtral-8x7B Q4_K_M in 12 GiB (one
# round, 64 tokens). Carry bin/gpu-tests.txz with strata-old and
# strata-a inside.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf X=$S/mixtral-8x7b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
P='The history of the printing press begins in the fifteenth century, when'
one() { # model vram tokens round variant
	local bin=$B/strata
	[ $5 = new ] || bin=$B/strata-$5
	timeout 150 "$bin" run -m "$1" --backend cuda --vram $2 -n $3 -p "$P" --stats >/dev/null 2>"$L/stats-$(basename $1 .gguf)-$2-$5-$4.txt"
	echo "== r$4 $(basename $1 .gguf | cut -c1-8) $2 $5 rc=$? at ${SECONDS}s $(grep -oE 'completion: [^;]*' "$L/stats-$(basename $1 .gguf)-$2-$5-$4.txt")"
}
for r in 1 2; do
	for vr in 8GiB 4GiB; do
		for v in old a new; do one "$Q" $vr 256 $r $v; done
	done
done
if [ "${1:-}" = mixtral ]; then
	[ -f "$X" ] || "$B/strata" model synth --arch mixtral --shape 8x7b --type q4_k_m -q -o "$X" || exit 3
	echo "== synth mixtral at ${SECONDS}s"
	for v in old a new; do one "$X" 12GiB 64 1 $v; done
fi
