#!/usr/bin/env bash
# Device call: the CPU's attention in spans (engine/model/attnblock.go:
# a decode step's blocks split over spans of 256 positions, merged after)
# against the blocks whole (the tree before), CPU-only 8b decode at a
# 4096-token prompt on 16 threads, binaries alternating; then run39's
# part 2 (the 70b hybrid at batch 8) with the new binary (the tree's
# head: bench cpu --cpuprofile for a profile of the decode). Carry only
# bin/ab2.txz (strata-old, strata-new: tools/strata built with -s -w):
# with bin/gpu-tests.txz the call is over the 64 MiB it may carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
L=${OUT:-h200-logs}
S=/dev/shm
mkdir -p "$L"
tar xJf bin/ab2.txz -C bin || exit 2
echo "== host: $(nproc) processors, load $(cut -d' ' -f1-3 /proc/loadavg)"
M8=$S/llama-8b-q4_k_m-seed1.gguf
[ -f "$M8" ] || timeout 60 bin/ab/strata-new model synth --arch llama --shape 8b --type q4_k_m --seed 1 -q -o "$M8" >/dev/null 2>&1
# gctrace: whether a collection falls in the decode after the prompt
# (run39 saw decode at 512 positions 12 ms a token slower than after a
# short prompt, as much as at 4096).
for v in ${VARIANTS:-old new}; do
	GODEBUG=gctrace=1 timeout 100 "bin/ab/strata-$v" bench cpu --threads 16 --only Q4_K --size 256MiB --weights 256MiB --time 100ms --model "$M8" --tokens 16 --prompt "${PROMPT:-4096}" >"$L/long-$v.txt" 2>&1
	echo "== $v rc=$? at ${SECONDS}s: $(grep -E 'prefill' "$L/long-$v.txt")"
	# Right after the long prefill (AMX-heavy on every core), a decode
	# after a short prompt again: slow too, the host's clock (power,
	# heat), not the context, took the at-length decode's time.
	timeout 60 "bin/ab/strata-$v" bench cpu --threads 16 --only Q4_K --size 256MiB --weights 256MiB --time 100ms --model "$M8" --tokens 16 -q >"$L/after-$v.txt" 2>&1
	echo "== short decode right after: $(grep -E 'decode of' "$L/after-$v.txt" | grep -o '[0-9.]* tokens/s' | head -1)"
done
GODEBUG=gctrace=1 timeout 60 bin/ab/strata-new bench cpu --threads 16 --only Q4_K --size 256MiB --weights 256MiB --time 100ms --model "$M8" --tokens 16 --prompt 512 >"$L/p512-new.txt" 2>&1
echo "== p512 rc=$? at ${SECONDS}s: $(grep -E 'prefill' "$L/p512-new.txt")"
grep -E "^gc |^\[" "$L/p512-new.txt" | tail -8
# Where the 16-thread decode's time goes (0.62 of the read rate, where
# the GEMV alone reaches 0.77-0.80).
timeout 60 bin/ab/strata-new bench cpu --threads 16 --only Q4_K --size 256MiB --weights 256MiB --time 100ms --model "$M8" --tokens 48 --prompt 0 -q --cpuprofile "$L/decode16.prof" >"$L/decode16.txt" 2>&1
echo "== profile rc=$? at ${SECONDS}s: $(grep -E 'decode of' "$L/decode16.txt" | grep -o '[0-9.]* tokens/s' | head -1)"
# NO70B=1 leaves the 70b out (a call with little device time left).
if [ -z "${NO70B:-}" ]; then
	timeout 300 bin/ab/strata-new bench engine --synth-dir "$S" --only 70b --peers docs/peers-h200.json --json-file "$L/70b.json" >"$L/70b.txt" 2>&1
	echo "== 70b rc=$? at ${SECONDS}s"; grep -E "decode|limit|streaming|plan" "$L/70b.txt" | cut -c1-180 | head -20
fi
echo "== host after: load $(cut -d' ' -f1-3 /proc/loadavg) at ${SECONDS}s"
