#!/usr/bin/env bash
# Device calls: the batch-8 peer. llama.cpp's llama-batched-bench at 8
# sequences of 128 tokens (S_TG, the aggregate decode; and 1 sequence)
# with --n-cpu-moe on the synthetic Qwen3-30B-A3B (8 and 4 GiB of experts'
# worth: -ncmoe 29, 40) and Mixtral-8x7B (12 GiB: -ncmoe 19) files, then
# `strata bench engine --only moe --moe-fixed=false --moe-served 0` on
# the same host against them: the served batch (8 requests at once
# through the daemon's scheduler, 128 tokens each). With `full`, also
# llama-bench's tg32/tg512 for the batch-1 rows and the bench's fixed
# placements and served decode of 512 tokens (more than one call).
# Each call does what the last left on the warm machine (results wait in
# /dev/shm/run5), stopping before the call's limit: call it again until
# it prints "== bench rc=". LIMIT (default 590) is the seconds a call
# may take, less where the device budget left is short; ONLY=qwen-29 (or
# mixtral-19, qwen-40) benches that case alone. Carry bin/gpu-tests.txz (strata alone is
# enough) and bin/llama-src.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
R=$S/run5
LIMIT=${LIMIT:-590}
mkdir -p "$R"
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf M=$S/mixtral-8x7b-q4_k_m-seed1.gguf
full=${1:-}
. lab/peers/llama.sh
if [ ! -x "$lbin/llama-batched-bench" ] || [ ! -x "$lbin/llama-bench" ]; then
	{ [ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q"
	  case ${ONLY:-mixtral-19} in mixtral-19) [ -f "$M" ] || "$B/strata" model synth --arch mixtral --shape 8x7b --type q4_k_m -q -o "$M" ;; esac; } &
	build_llama llama-bench llama-batched-bench
	wait
	echo "== synth done at ${SECONDS}s"
	[ -x "$lbin/llama-batched-bench" ] || exit 1
fi
BB="-npp 16 -ntg 128 -npl 1,8 -c 2048 -t 16 -ngl 99 -fa off"
# The cases in the bench's order of importance; a call short of time
# benches against the peers it has (the others' rows carry no ratio).
step batched-qwen-29 90 "$lbin/llama-batched-bench" -m "$Q" -ncmoe 29 $BB
step batched-mixtral-19 150 "$lbin/llama-batched-bench" -m "$M" -ncmoe 19 $BB
step batched-qwen-40 100 "$lbin/llama-batched-bench" -m "$Q" -ncmoe 40 $BB
tables=() cases=()
for c in qwen3moe:29:qwen-29:qwen3moe-30b-a3b-8GiB qwen3moe:40:qwen-40:qwen3moe-30b-a3b-4GiB mixtral:19:mixtral-19:mixtral-8x7b-12GiB; do
	IFS=: read -r arch ncmoe name bcase <<<"$c"
	f=$R/batched-$name.txt
	[ -s "$f" ] && tables+=(--batched "$arch:$ncmoe:$f") && cases+=("$bcase")
done
[ ${#tables[@]} -gt 0 ] || { echo "== no peer yet: call again"; exit 0; }
if [ "$full" = full ]; then
	step bench-qwen 120 "$lbin/llama-bench" -m "$Q" -ngl 99 -ncmoe 29,40 -p 0 -n 32,512 -r 1 -t 16 -fa 0 &&
		step bench-mixtral 170 "$lbin/llama-bench" -m "$M" -ngl 99 -ncmoe 19 -p 0 -n 16,512 -r 1 -t 16 -fa 0 || { echo "== call again"; exit 0; }
	tables+=("$R/bench-qwen.txt" "$R/bench-mixtral.txt")
fi
cp "$R"/*.txt "$L"/ 2>/dev/null
python3 lab/peers/peersfile.py "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "${tables[@]}" >"$R/peers-host.json" &&
	cp "$R/peers-host.json" "$L/" && echo "== peers" && grep -E '"(value|setup)"' "$R/peers-host.json" | cut -c1-160 || exit 1
# The served batch of the cases with a peer (all of them with full).
args=(--moe-fixed=false --moe-served 0 --moe-cases "$(IFS=,; echo "${cases[*]}")")
need=90
if [ "$full" = full ]; then args=(--moe-zipf 0 --moe-served 512); need=570; fi
if [ $((SECONDS + need)) -gt "$LIMIT" ]; then echo "== bench left for the next call (${SECONDS}s)"; exit 0; fi
timeout -k 10 $((LIMIT + 5 - SECONDS)) "$B/strata" bench engine --synth-dir $S --only moe --moe-served-batch 8 "${args[@]}" \
	--peers "$R/peers-host.json" --json-file "$L/bench-moe.json" >"$L/bench-moe.txt" 2>&1
echo "== bench rc=$? at ${SECONDS}s"
grep -vE "^\[" "$L/bench-moe.txt" | grep -E "tok/s|hit|goals|model:|served" | grep -v '^ *note' | cut -c1-230
