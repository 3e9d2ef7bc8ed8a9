#!/usr/bin/env bash
# Device call: the device's experts following the routing served (windows of
# 32 tokens against a fading history, 485733e) against the old adapter
# (windows of 512 against the one before, 16c0124: bin/gpu-tests/strata-old,
# put into the bundle by hand), strata run over 1024 tokens at 8 and 4 GiB
# with --stats-every 128, interleaved; then decode attention by span
# (kernels' BenchmarkAttentionDecode: does a long context cost the MoE's
# GPU attention); then the 8b half's hybrid host phases with the enqueue
# split at the first layer and the output head. Carry bin/gpu-tests.txz.
. "$(dirname "$0")/../hybrid/lib.sh"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
echo "== synth at ${SECONDS}s"
P='The history of the printing press begins in the fifteenth century, when'
run() { # binary, name, then strata run's arguments
	local bin=$1 n=$2; shift 2
	timeout 150 "$B/$bin" run -m "$Q" --backend cuda --stats -p "$P" "$@" >/dev/null 2>"$L/$n.txt"
	echo "== $n rc=$? at ${SECONDS}s"; grep -E '^(prompt|tokens|experts in)' "$L/$n.txt" | cut -c1-300
}
(cd kernels && timeout 150 "$B/kernels.test" -test.run XXX -test.bench AttentionDecode -test.benchtime 1x >"$L/attn.txt" 2>&1)
echo "== attention rc=$? at ${SECONDS}s"; grep attn-decode "$L/attn.txt"
timeout 200 "$B/strata" bench engine --synth-dir $S --only streamed --timeline --peers docs/peers-h200.json >"$L/streamed.txt" 2>&1
echo "== streamed rc=$? at ${SECONDS}s"; grep -E "hybrid (decode|time per decode pass)|note: hybrid" "$L/streamed.txt" | grep -v "s\]" | cut -c1-420
run strata new-8-a --vram 8GiB -n 1024 --stats-every 128
run strata-old old-8-a --vram 8GiB -n 1024 --stats-every 128
run strata new-4 --vram 4GiB -n 1024 --stats-every 128
run strata-old old-4 --vram 4GiB -n 1024 --stats-every 128
