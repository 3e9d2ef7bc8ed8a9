# Sourced by the peers' device scripts: build_llama TARGET... unpacks
# bin/llama-src.txz (llama.cpp c2b1518fd, NOTES.md) into bin/lb once and
# builds the targets with CUDA for sm_90 (static, GGML_NATIVE, FA off)
# into bin/lb/lcpp/build/bin, the build's log in $L/llama-build.log.
LB=$PWD/bin/lb
lbin=$LB/lcpp/build/bin
build_llama() {
	[ -d "$LB/lcpp" ] || { mkdir -p "$LB" && tar xJf bin/llama-src.txz -C "$LB"; } || return 1
	(
		cd "$LB/lcpp" &&
		{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
			-DGGML_NATIVE=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
			-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF; } &&
		timeout 420 ninja -C build "$@"
	) >"$L/llama-build.log" 2>&1
	local rc=$?
	echo "== llama build rc=$rc at ${SECONDS}s"; tail -1 "$L/llama-build.log"
	return $rc
}
