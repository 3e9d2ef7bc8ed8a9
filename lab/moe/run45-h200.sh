#!/usr/bin/env bash
# Device call: session 50's changes checked and measured. First the tests
# they touch (kernels' decode attention at every split count and the split
# choice; engine/gemv's CPU kernels, regenerated in cfa7453, on the host's
# AVX-512; engine/gpu's MoE, swap and hybrid tests); then, at 8 and 4 GiB
# over 1024 tokens, interleaved: this tree (bin/gpu-tests/strata: the
# ways tried again as the placement moves, and the adapter's rounds of 128
# moves), 8c91b69 (strata-s128: rounds of 128 alone) and 8c91b69^
# (strata-s32: rounds of 32); then one token's decode attention aimed at 8 blocks a
# multiprocessor from a 2048-key span (2c3899e: strata-s32) against 2 (its
# parent 08a5fa8: strata-a2) after a 2552-token prompt. Carry
# bin/gpu-tests.txz with the three strata binaries inside (the header of
# lab/moe/NOTES.md's run45 says how it was built).
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" &
(cd kernels && timeout 120 "$B/kernels.test" -test.run 'TestAttention|TestDecodeSplits' -test.timeout 3m) >"$L/kernels.log" 2>&1
echo "== kernels rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/kernels.log" | head
(cd engine/gpu && timeout 150 "$B/engine-gpu.test" -test.run 'Swap|MoE' -test.timeout 3m) >"$L/engine-gpu.log" 2>&1
echo "== engine-gpu rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine-gpu.log" | head
wait
echo "== synth at ${SECONDS}s"
P='The history of the printing press begins in the fifteenth century, when'
LONG=$(for i in $(seq 40); do printf '%s paragraph %d of a long text about presses, type and ink. ' "$P" "$i"; done)
run() { # binary, name, then strata run's arguments
	local bin=$1 n=$2; shift 2
	timeout 150 "$B/$bin" run -m "$Q" --backend cuda --stats "$@" >/dev/null 2>"$L/$n.txt"
	echo "== $n rc=$? at ${SECONDS}s"; grep -E '^(prompt|tokens)' "$L/$n.txt" | cut -c1-300
}
# Most wanted first: a cut-short call keeps what ran.
for v in 8 4; do
	run strata head-$v --vram ${v}GiB -n 1024 -p "$P" --stats-every 128
	run strata-s32 s32-$v --vram ${v}GiB -n 1024 -p "$P" --stats-every 128
done
(cd engine/gemv && timeout 120 "$B/engine-gemv.test" -test.timeout 3m) >"$L/gemv.log" 2>&1
echo "== gemv rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/gemv.log" | head; grep -o -w -m1 'avx512f\|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
for v in 8 4; do
	run strata-s128 s128-$v --vram ${v}GiB -n 1024 -p "$P" --stats-every 128
done
run strata-s32 long8-1 --vram 8GiB -n 256 -p "$LONG" --stats-every 64
run strata-a2 long2-1 --vram 8GiB -n 256 -p "$LONG" --stats-every 64
(cd engine && timeout 120 "$B/engine.test" -test.run 'CUDA|Adapt' -test.timeout 3m) >"$L/engine.log" 2>&1
echo "== engine rc=$? at ${SECONDS}s"; grep -E -- "--- FAIL|^(ok|FAIL|PASS)|panic" "$L/engine.log" | head
