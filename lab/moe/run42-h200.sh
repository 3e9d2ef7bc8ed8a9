#!/usr/bin/env bash
# Device call: where a token of strata run goes beyond the pass the MoE
# trial times (run40: Qwen 8 GiB kept the host's way at 8.96 ms a pass, yet
# 256 tokens ran at 84.58 tok/s, 11.8 ms a token). strata run at 64, 256
# and 1024 tokens (the marginal cost of a token against the first ones'),
# then the 8b half's hybrid timeline (lab/hybrid/run26-h200.sh). Carry
# bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
P='The history of the printing press begins in the fifteenth century, when'
for n in 64 256 1024 256 64; do
	timeout 120 "$B/strata" run -m "$Q" --backend cuda --vram 8GiB -n $n -p "$P" --stats >/dev/null 2>"$L/stats-8GiB-$n.txt"
	echo "== $n rc=$? at ${SECONDS}s $(grep -oE 'completion: [^;]*' "$L/stats-8GiB-$n.txt") $(grep -oE 'kept by trial: [^)]*' "$L/stats-8GiB-$n.txt")"
done
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json --json-file "$L/streamed.json" >"$L/streamed.txt" 2>&1
echo "== streamed rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)|note: hybrid" "$L/streamed.txt" | grep -v "s\]" | cut -c1-300
