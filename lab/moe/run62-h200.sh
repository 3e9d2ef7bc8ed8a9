#!/usr/bin/env bash
# Device call (written in session 60): lab/moe/ahead1.patch, the next
# layer's guessed experts staged ahead at one token too (moePicked), on
# top of the batch layers' staging ahead (af17d95). Build the bundle with
# the patch in the work tree, so that its test binaries carry it:
#   git apply lab/moe/ahead1.patch && bash lab/bundle.sh pre=HEAD
# (ab/strata-main is then the patch, ab/strata-pre the head without it).
# The pick stream's GPU tests (TestStreamPicks asserts the one-token
# staging), then Qwen3-30B-A3B Q4_K_M served at one token (512 greedy
# tokens through the engine and the scheduler) at 8 and 4 GiB, ABBA, and
# the served batch at 8 GiB once each (the patch moves code the batch
# path shares). Stops starting runs past LIMIT (default 400) seconds.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
LIMIT=${LIMIT:-400}
echo "== card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cpus"
(cd engine/gpu && timeout 200 "$B/engine-gpu.test" -test.run 'TestStreamPicks|TestBatchShare|TestAhead|TestMoE|TestHostToDeviceBeside|TestHybrid' -test.v >"$L/gpu-tests.txt" 2>&1)
echo "== tests rc=$? at ${SECONDS}s"; grep -E '^(--- |ok|FAIL|panic)|staged ahead|beside a sleeper' "$L/gpu-tests.txt" | cut -c1-200 | head -30
for v in ${BATCH:-pre s2 s8 main main s8 s2 pre}; do
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before batch $v at ${SECONDS}s"; break; }
	served "$v" 8
done
for vc in main:8 pre:8 pre:8 main:8 main:4 pre:4 pre:4 main:4; do
	v=${vc%:*} gib=${vc#*:}
	[ "$SECONDS" -lt "$LIMIT" ] || { echo "== stopped before $vc at ${SECONDS}s"; break; }
	echo "== $v $gib GiB" >>"$L/served1.txt"
	timeout 100 bin/ab/strata-$v bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-${gib}GiB \
		--moe-fixed=false --moe-served-batch 0 >>"$L/served1.txt" 2>&1
	echo "== served one token, $v $gib GiB rc=$? at ${SECONDS}s"
	tac "$L/served1.txt" | sed '/^== /q' | tac | grep -E '^ +served decode|note: served decode: [0-9]+ experts copied' | cut -c1-160
done
