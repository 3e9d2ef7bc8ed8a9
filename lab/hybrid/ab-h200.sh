#!/usr/bin/env bash
# One device call: the hybrid GPU tests, then an A/B of the AVX-512 GEMV
# kernels' software prefetch distance (bin/ab.txz: strata built with
# -prefetch 0, 1024, 4096; bin/gpu-tests' strata is the default 2048) on
# the 16-core host, and the FFN benchmark. Logs to $OUT.
. "$(dirname "$0")/lib.sh"
G=$S/gocode-29m-f16.gguf
if [ -f bin/models/gocode-29m-f16.gguf.xz ]; then
	[ -f "$G" ] || python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' bin/models/gocode-29m-f16.gguf.xz "$G"
	cp bin/models/gocode-29m-f16.golden.json "$S/"
fi
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || "$B/strata" model synth --arch llama --shape 8b --type q4_k_m --seed 1 -o "$M8" >"$L/synth.log" 2>&1
lscpu >"$L/lscpu.txt" 2>&1; cat /sys/kernel/mm/transparent_hugepage/enabled >>"$L/lscpu.txt"
for v in pf0:bin/ab/strata-pf0 pf1024:bin/ab/strata-pf1024 pf2048:$B/strata pf4096:bin/ab/strata-pf4096 pf0b:bin/ab/strata-pf0 pf2048b:$B/strata; do
	n=${v%%:*} s=${v#*:}
	timeout 90 "$s" bench cpu --threads 16 --only Q4_K,Q6_K --model "$M8" --tokens 32 -q >"$L/cpu-$n.txt" 2>&1
	echo "== $n"; grep -E "read|Q4_K|Q6_K|decode|tok/s" "$L/cpu-$n.txt" | head -8
done
(cd engine/model && timeout 100 ../../bin/ab/model.test -test.run XXX -test.bench FFN -test.benchtime 40x) >"$L/ffn.log" 2>&1
grep Bench "$L/ffn.log"
(cd engine/gpu && STRATA_8B_GGUF=$M8 STRATA_8B_STEPS=16 STRATA_GOCODE_GGUF=$G timeout 200 "$B/engine-gpu.test" -test.v -test.run 'Hybrid|Gocode|8B' -test.timeout 20m) >"$L/engine-gpu-hybrid.log" 2>&1
grep -E -- '--- (PASS|FAIL)|^(ok|FAIL)|panic' "$L/engine-gpu-hybrid.log" | tail -20
