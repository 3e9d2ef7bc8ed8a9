# Sourced by the peers' device scripts: build_llama TARGET... unpacks
# bin/llama-src.txz (llama.cpp c2b1518fd, NOTES.md) into bin/lb once and
# builds the targets with CUDA for sm_90 (static, GGML_NATIVE, FA off)
# into bin/lb/lcpp/build/bin, the build's log in $L/llama-build.log;
# step runs one bench of a call that can be repeated (below).
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
# step NAME SECONDS CMD...: runs CMD into $R/NAME.txt unless done (a warm
# machine keeps the results of an earlier call), when the call has at
# least SECONDS left of its LIMIT; a batched-* step only for ONLY's case
# when ONLY is set.
step() {
	local name=$1 need=$2
	shift 2
	[ -s "$R/$name.txt" ] && return 0
	case $name in batched-*) [ -z "${ONLY:-}" ] || [ "$name" = "batched-$ONLY" ] || return 0 ;; esac
	if [ $((SECONDS + need)) -gt "$LIMIT" ]; then
		echo "== $name left for the next call (${SECONDS}s)"; return 1
	fi
	timeout "$need" "$@" >"$R/$name.tmp" 2>"$L/$name.err"
	local rc=$?
	echo "== $name rc=$rc at ${SECONDS}s"
	[ $rc = 0 ] || { tail -3 "$L/$name.err"; return 1; }
	mv "$R/$name.tmp" "$R/$name.txt" && grep -E '^\|' "$R/$name.txt" | tail -n +3
}
