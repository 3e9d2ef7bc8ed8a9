#!/usr/bin/env bash
# The build machine (no GPU): CPU-only decode, strata against llama.cpp on
# the same synthetic GGUFs, in one run. llama.cpp is upstream c2b1518fd from
# the unslothai/llama.cpp snapshot (see NOTES.md, "The source"), built for
# the CPU; strata is this tree. Usage: bash lab/peers/cpu-local.sh [threads]
# (default: every CPU). Needs cmake, ninja and g++; ~25 GiB of disk in $W.
set -euo pipefail
T=${1:-$(nproc)}
W=${W:-/tmp/peers-cpu}
R=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$W"
if [ ! -x "$W/lcpp/build/bin/llama-bench" ]; then
	rm -rf "$W/lcpp" && mkdir -p "$W/lcpp"
	git -C /work/.mirror/unslothai+llama.cpp/repo archive c2b1518fd CMakeLists.txt cmake common ggml include src tools vendor licenses LICENSE |
		tar x -C "$W/lcpp"
	cmake -S "$W/lcpp" -B "$W/lcpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
		-DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF >/dev/null
	ninja -C "$W/lcpp/build" llama-bench >/dev/null
fi
(cd "$R" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -o "$W/strata" ./tools/strata)
for m in "llama 8b" "qwen3moe 30b-a3b"; do
	set -- $m
	f=$W/$1-$2.gguf
	[ -f "$f" ] || "$W/strata" model synth --arch "$1" --shape "$2" -q -o "$f"
	cat "$f" >/dev/null # both read it from the page cache
	echo "== $1 $2, $T threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
	for rep in 1 2; do
		"$W/lcpp/build/bin/llama-bench" -m "$f" -ngl 0 -t "$T" -p 0 -n 32 -r 3 -o csv 2>/dev/null |
			awk -F, 'NR>1 {gsub(/"/,""); printf "llama.cpp tg32: %s tok/s\n", $(NF-1)}'
		"$W/strata" bench cpu --model "$f" --threads "$T" --only Q4_K --size 1GiB --weights 1GiB --tokens 32 -q 2>/dev/null |
			grep "CPU-only decode"
	done
done
