#!/usr/bin/env bash
# Device call: llama.cpp (c2b1518fd, bin/llama-src.txz as run1-h200.sh
# describes) built with CUDA on the lent machine, then llama-bench
# --n-cpu-moe and strata on the same synthetic Qwen3-30B-A3B file, in one
# lease: the hosts lent now differ from the H200 host of docs/peers-h200.json
# (their CPUs ran strata's MoE rows 1.2-1.5x faster). The build tree stays
# in the ignored bin/lb (a warm machine keeps it; a cut-short build goes on
# next call). Carry bin/gpu-tests.txz and bin/llama-src.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
LB=$PWD/bin/lb
[ -d "$LB/lcpp" ] || { mkdir -p "$LB" && tar xJf bin/llama-src.txz -C "$LB"; }
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" &
(
	cd "$LB/lcpp" &&
	{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
		-DGGML_NATIVE=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF; } &&
	timeout 420 ninja -C build llama-bench
) >"$L/llama-build.log" 2>&1
echo "== llama build rc=$? at ${SECONDS}s"; tail -2 "$L/llama-build.log"
wait
lbin=$LB/lcpp/build/bin/llama-bench
[ -x "$lbin" ] || exit 1
strip "$lbin" && xz -T0 -6 -c "$lbin" >"$L/llama-bench.xz" && ls -la "$L/llama-bench.xz"
P='The history of the printing press begins in the fifteenth century, when'
for round in 1 2; do
	timeout 100 "$lbin" -m "$Q" -ngl 99 -ncmoe 29,40 -p 0 -n 32 -r 2 -t 16 -fa 0 -v >"$L/llama-qwen-$round.txt" 2>"$L/llama-qwen-$round.log"
	echo "== llama qwen rc=$? at ${SECONDS}s"; grep -E "tg32" "$L/llama-qwen-$round.txt"; grep -E "CUDA0 (model|KV|compute) buffer" "$L/llama-qwen-$round.log" | sort | uniq -c
	for v in 8 4; do
		timeout 100 "$B/strata" run -m "$Q" --backend cuda --vram ${v}GiB -n 32 -p "$P" --stats >/dev/null 2>"$L/strata-$v-$round.txt"
		echo "== strata ${v}GiB rc=$? at ${SECONDS}s $(grep -oE 'completion: [^;]*' "$L/strata-$v-$round.txt")"
	done
done
