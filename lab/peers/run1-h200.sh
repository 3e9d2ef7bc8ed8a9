#!/usr/bin/env bash
# Device call: build llama.cpp's llama-bench with CUDA for sm_90 on the H200
# (the source is bin/llama-src.txz: upstream llama.cpp at c2b1518fd,
# 2026-06-08, from the unslothai/llama.cpp snapshot, without models/,
# docs/ and tests/; the commit 3f545be of docs/peers-h200.json is in no
# snapshot this workplace can fetch), run branch moe-downs' GPU tests beside
# the build (and engine's CUDA MoE tests, which cover the CPU beside the
# GPU reading storage experts ahead), then, when time is left, strata bench engine --only moe and
# llama-bench --n-cpu-moe on the same synthetic files, in one lease.
# The stripped llama-bench comes back xz'd for later calls.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
export PATH=/usr/local/cuda/bin:$PATH
# The build tree lives in the ignored bin/lb, which a warm machine keeps
# between calls: a build cut short by its timeout goes on in the next call.
LB=$PWD/bin/lb
[ -d "$LB/lcpp" ] || { mkdir -p "$LB" && tar xJf bin/llama-src.txz -C "$LB"; }
(
	cd "$LB/lcpp" &&
	{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
		-DGGML_NATIVE=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF; } &&
	timeout 480 ninja -C build llama-bench
) >"$L/llama-build.log" 2>&1 &
bp=$!
(cd kernels && timeout 90 "$B/kernels.test" -test.run 'GEMVEach|QuantizeHeld|NormQ' -test.v -test.timeout 5m) >"$L/kernels.log" 2>&1
echo "== kernels rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/kernels.log" | head
(cd engine/gpu && timeout 150 "$B/engine-gpu.test" -test.run 'MoE|ExpertTrial|SetResidentExperts' -test.timeout 5m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
# The CPU beside the GPU reading storage experts ahead (engine/gpu's onCPU filter).
(cd engine && timeout 150 "$B/engine.test" -test.run 'ExpertsOnStorageCUDA|ExpertsOnDeviceCUDA|MoEOnCUDA' -test.v -test.timeout 5m) >"$L/engine.log" 2>&1
echo "== engine rc=$?"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic|read ahead" "$L/engine.log" | head
wait $bp
echo "== llama build rc=$? at ${SECONDS}s"; tail -3 "$L/llama-build.log"
lbin=$LB/lcpp/build/bin/llama-bench
[ -x "$lbin" ] || exit 1
strip "$lbin" && xz -T0 -6 -c "$lbin" >"$L/llama-bench.xz" && ls -la "$L/llama-bench.xz"
ldd "$lbin" | grep -E "cuda|cublas|not found"
[ $SECONDS -lt 250 ] || { echo "== no time left for the benches"; exit 0; }
timeout 150 "$B/strata" bench engine --synth-dir "$S" --only moe >"$L/bench-moe-new.txt" 2>&1
echo "== moe new rc=$?"; grep -E "^  decode, batch 1|trial kept" "$L/bench-moe-new.txt" | cut -c1-150 | sed -E 's/ {3,}/  /g'
ls -la "$S"/*.gguf
q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf m=$S/mixtral-8x7b-q4_k_m-seed1.gguf
timeout 100 "$lbin" -m "$q" -ngl 99 -ncmoe 29,40,48 -p 0 -n 32 -r 2 -t 16 -fa 0 -v >"$L/llama-qwen.txt" 2>"$L/llama-qwen.log"
echo "== llama qwen rc=$?"; cat "$L/llama-qwen.txt"; grep -E "CUDA0 (model|KV|compute) buffer" "$L/llama-qwen.log"
[ $SECONDS -lt 500 ] || exit 0
timeout 90 "$lbin" -m "$m" -ngl 99 -ncmoe 19,32 -p 0 -n 16 -r 2 -t 16 -fa 0 -v >"$L/llama-mixtral.txt" 2>"$L/llama-mixtral.log"
echo "== llama mixtral rc=$?"; cat "$L/llama-mixtral.txt"; grep -E "CUDA0 (model|KV|compute) buffer" "$L/llama-mixtral.log"
