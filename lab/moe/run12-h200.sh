#!/usr/bin/env bash
# Device call: llama.cpp's llama-bench (built here from bin/llama-src.txz as
# lab/peers/run1-h200.sh builds it, unless bin/llama-bench.xz came along)
# beside strata on the same files in one lease, after the change that
# checks only the picked experts in FFNRouted (engine/model's checkFFN
# checked all 384 expert tensors of a Qwen3-30B-A3B layer on every call):
# BenchmarkMoEFFN before and after (bin/mt.txz: mt-old.test, mt-new.test),
# strata bench engine --only moe, llama-bench --n-cpu-moe. The stripped
# llama-bench comes back xz'd in 15 MB parts (llama-bench.xz.aa, ...):
# cat them into bin/llama-bench.xz for later calls.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
LB=$PWD/bin/lb
lbin=$LB/lcpp/build/bin/llama-bench
if [ -f bin/llama-bench.xz ]; then
	mkdir -p "$(dirname "$lbin")" && xz -dc bin/llama-bench.xz >"$lbin" && chmod +x "$lbin"
else
	[ -d "$LB/lcpp" ] || { mkdir -p "$LB" && tar xJf bin/llama-src.txz -C "$LB"; }
	(
		cd "$LB/lcpp" &&
		{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
			-DGGML_NATIVE=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
			-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF; } &&
		timeout 300 ninja -C build llama-bench
	) >"$L/llama-build.log" 2>&1
	echo "== llama build rc=$? at ${SECONDS}s"; tail -1 "$L/llama-build.log"
	[ -x "$lbin" ] || exit 1
	strip "$lbin" && xz -T0 -6 -c "$lbin" | split -b 15000000 - "$L/llama-bench.xz."
fi
mkdir -p bin && tar xJf bin/mt.txz -C bin || exit 2
for v in old new old new; do
	echo "== BenchmarkMoEFFN $v"
	(cd engine/model && "../../bin/mt/mt-$v.test" -test.run XXX -test.bench MoEFFN -test.benchtime 1s) | grep Benchmark
done 2>&1 | tee "$L/moeffn.txt"
timeout 150 "$B/strata" bench engine --synth-dir "$S" --only moe >"$L/bench-moe.txt" 2>&1
echo "== moe rc=$? at ${SECONDS}s"
grep -E "^  decode, batch 1|CPU busy|handed|trial kept" "$L/bench-moe.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf m=$S/mixtral-8x7b-q4_k_m-seed1.gguf
timeout 100 "$lbin" -m "$q" -ngl 99 -ncmoe 29,40,48 -p 0 -n 32 -r 2 -t 16 -fa 0 >"$L/llama-qwen.txt" 2>"$L/llama-qwen.log"
echo "== llama qwen rc=$?"; grep tg "$L/llama-qwen.txt"
timeout 90 "$lbin" -m "$m" -ngl 99 -ncmoe 19,32 -p 0 -n 16 -r 2 -t 16 -fa 0 >"$L/llama-mixtral.txt" 2>"$L/llama-mixtral.log"
echo "== llama mixtral rc=$? at ${SECONDS}s"; grep tg "$L/llama-mixtral.txt"
rm -f "$L/llama-qwen.log" "$L/llama-mixtral.log"
