#!/usr/bin/env bash
# Device call: run2's peers over long decodes. run2 compared 32 tokens,
# where strata's device experts have not yet followed the routing served
# (run44: the hit climbs over the first ~500 tokens); here llama-bench
# tg32 and tg512 against `strata run -n 512` (the length of bench
# engine's served decode) on the same synthetic Qwen3-30B-A3B file (8 and
# 4 GiB of experts' worth, -ncmoe 29 and 40 as run2 checked), two rounds
# alternating, then Mixtral-8x7B at 12 GiB (-ncmoe 19, two reps: run3 ran one). The llama.cpp
# figures (means of the rounds) become a peers file for this host,
# peers-host.json in the logs and in /dev/shm for the next call on the
# same warm machine (run4-h200.sh: bench engine --only moe against it).
# llama.cpp c2b1518fd is built again (a cold machine has no bin/lb).
# Carry bin/gpu-tests.txz (strata alone is enough) and bin/llama-src.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
. lab/peers/llama.sh
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf M=$S/mixtral-8x7b-q4_k_m-seed1.gguf
{ [ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q"
  [ -f "$M" ] || "$B/strata" model synth --arch mixtral --shape 8x7b --type q4_k_m -q -o "$M"; } &
build_llama llama-bench
wait
echo "== synth done at ${SECONDS}s"
lbin=$lbin/llama-bench
[ -x "$lbin" ] || exit 1
P='The history of the printing press begins in the fifteenth century, when'
strata() { # model, VRAM, tokens, log name
	timeout 120 "$B/strata" run -m "$1" --backend cuda --vram "$2" -n "$3" -p "$P" --stats --stats-every 256 >/dev/null 2>"$L/$4.txt"
	echo "== strata $4 rc=$? at ${SECONDS}s $(grep -oE 'completion: [^;]*' "$L/$4.txt")"
}
for round in 1 2; do
	timeout 150 "$lbin" -m "$Q" -ngl 99 -ncmoe 29,40 -p 0 -n 32,512 -r 2 -t 16 -fa 0 >"$L/llama-qwen-$round.txt" 2>/dev/null
	echo "== llama qwen rc=$? at ${SECONDS}s"; grep -E "tg" "$L/llama-qwen-$round.txt"
	strata "$Q" 8GiB 512 strata-qwen-8-$round
	strata "$Q" 4GiB 512 strata-qwen-4-$round
done
timeout 150 "$lbin" -m "$M" -ngl 99 -ncmoe 19 -p 0 -n 16,512 -r 2 -t 16 -fa 0 -v >"$L/llama-mixtral.txt" 2>"$L/llama-mixtral.log"
echo "== llama mixtral rc=$? at ${SECONDS}s"; grep -E "tg" "$L/llama-mixtral.txt"
grep -E "CUDA0 (model|KV|compute) buffer|n_cpu_moe" "$L/llama-mixtral.log" | sort -u >"$L/llama-mixtral.buffers" && rm "$L/llama-mixtral.log"
strata "$M" 12GiB 512 strata-mixtral-12
python3 lab/peers/peersfile.py "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
	"$L"/llama-qwen-1.txt "$L"/llama-qwen-2.txt "$L"/llama-mixtral.txt >"$L/peers-host.json" &&
	cp "$L/peers-host.json" $S/peers-host.json && cat "$L/peers-host.json"
