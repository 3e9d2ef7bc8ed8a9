#!/usr/bin/env bash
# Device call: what grows in a long MoE decode (run42: a token of strata run
# cost 11.4-12.0 ms over the first 256 and 14.4 ms over 257-1024, at 8 GiB).
# strata run --stats-every 128 over 1024 tokens (each window's time per
# token and its expert picks by where they were served), then the same
# after a long prompt (position against the generated text's routing);
# then the 8b half's hybrid host phases (lab/hybrid/run27-h200.sh).
# Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
echo "== synth at ${SECONDS}s"
P='The history of the printing press begins in the fifteenth century, when'
LONG=$(for i in $(seq 40); do printf '%s paragraph %d of a long text about presses, type and ink. ' "$P" "$i"; done)
run() { # name, then strata run's arguments
	local n=$1; shift
	timeout 150 "$B/strata" run -m "$Q" --backend cuda --vram 8GiB --stats "$@" >/dev/null 2>"$L/$n.txt"
	echo "== $n rc=$? at ${SECONDS}s"; grep -E '^(prompt|tokens|experts in|expert uses)' "$L/$n.txt" | cut -c1-400
}
run long-1024 -n 1024 -p "$P" --stats-every 128
run prompt-long -n 256 -p "$LONG" --stats-every 64
run long-1024-b -n 1024 -p "$P" --stats-every 128
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json >"$L/streamed.txt" 2>&1
echo "== streamed rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)|note: hybrid" "$L/streamed.txt" | grep -v "s\]" | cut -c1-330
