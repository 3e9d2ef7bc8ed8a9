#!/usr/bin/env bash
# Device call(s): issue 20's peers on the lent host itself, where every
# earlier hybrid figure divided by docs/peers-h200.json's (the H200's).
# llama.cpp's llama-bench (c2b1518fd, lab/peers/llama.sh) on the
# synthetic Llama 8b and 70b Q4_K_M files: the 8b half (-ngl 17: the
# output and 16 blocks, tg128), the 8b on the CPU alone (-ngl 0, tg32),
# the 70b with 40 of 80 layers on the GPU (tg32); then a peers file of
# those (peersfile.py --dense) and, against it, `strata bench engine
# --only streamed,70b` and `strata bench cpu --model` (the 8b's CPU-only
# decode) on the same host. Results wait in /dev/shm/run6 on a warm
# machine: call again until it prints "== bench rc=". LIMIT (default
# 590) is the seconds a call may take; ONLY8=1 leaves the 70b out (one
# short call). Carry bin/gpu-tests.txz and bin/llama-src.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
R=$S/run6
LIMIT=${LIMIT:-590}
mkdir -p "$R"
M8=$S/llama-8b-q4_k_m-seed1.gguf M70=$S/llama-70b-q4_k_m-seed1.gguf
. lab/peers/llama.sh
if [ ! -x "$lbin/llama-bench" ]; then
	{ [ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -q -o "$M8"
	  [ -n "${ONLY8:-}" ] || [ -f "$M70" ] || "$B/strata" model synth --arch llama --shape 70b --type q4_k_m --seed 1 -q -o "$M70"; } &
	build_llama llama-bench
	wait
fi
step half 90 "$lbin/llama-bench" -m "$M8" -ngl 17 -p 0 -n 128 -r 2 -t 16 -fa 0 &&
	step cpu-only 90 "$lbin/llama-bench" -m "$M8" -ngl 0 -p 0 -n 32 -r 2 -t 16 -fa 0 &&
	{ [ -n "${ONLY8:-}" ] || step 70b 150 "$lbin/llama-bench" -m "$M70" -ngl 40 -p 0 -n 32 -r 1 -t 16 -fa 0; } || { echo "== call again"; exit 0; }
cp "$R"/*.txt "$L"/
tables=("$R/half.txt") only=streamed
[ -n "${ONLY8:-}" ] || tables+=("$R/70b.txt") only=streamed,70b
python3 lab/peers/peersfile.py --dense "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "${tables[@]}" >"$R/peers-host.json" &&
	cp "$R/peers-host.json" "$L/" && echo "== peers" && grep -E '"(value|setup)"' "$R/peers-host.json" | cut -c1-160 || exit 1
need=150
[ -z "${ONLY8:-}" ] || need=60
if [ $((SECONDS + need)) -gt "$LIMIT" ]; then echo "== bench left for the next call (${SECONDS}s)"; exit 0; fi
timeout 60 "$B/strata" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu.txt" 2>&1
echo "== cpu rc=$? at ${SECONDS}s"; grep -E "^ +16 |Q4_K|Q6_K|decode" "$L/cpu.txt" | cut -c1-200
timeout -k 10 $((LIMIT + 5 - SECONDS)) "$B/strata" bench engine --synth-dir $S --only $only --peers "$R/peers-host.json" \
	--json-file "$L/bench-hybrid.json" >"$L/bench-hybrid.txt" 2>&1
echo "== bench rc=$? at ${SECONDS}s"
grep -E "hybrid|decode, batch|goals|at once" "$L/bench-hybrid.txt" | grep -v "%" | cut -c1-230
