#!/usr/bin/env bash
# Device call: the device adapter's windows of 16 tokens (bin/ab/strata-w16)
# against 32 (strata-w32, the tree as it is), rounds of 128 moves both,
# `strata run -n 1024` at 8 and 4 GiB interleaved. Replayed
# (routing/sim-*.txt): 0.948 against 0.935 over the decode at 5.79 GiB,
# 0.811 against 0.783 at 1.8 GiB, with 1.3-1.6x the moves. Carry bin/ab.txz
# alone (both binaries; the full test bundle beside it passes the carry
# limit).
set -uo pipefail
cd "$(dirname "$0")/../.."
L=${OUT:-h200-logs} S=/dev/shm
mkdir -p "$L"
tar xJf bin/ab.txz -C bin || exit 2
B=$PWD/bin/ab
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
Q=$S/qwen3moe-30b-a3b-q4_k_m-seed1.gguf
[ -f "$Q" ] || "$B/strata-w32" model synth --arch qwen3moe --shape 30b-a3b --type q4_k_m -q -o "$Q" || exit 3
echo "== synth at ${SECONDS}s"
P='The history of the printing press begins in the fifteenth century, when'
run() { # binary, name, then strata run's arguments
	local bin=$1 n=$2; shift 2
	timeout 60 "$B/$bin" run -m "$Q" --backend cuda --stats "$@" >/dev/null 2>"$L/$n.txt"
	echo "== $n rc=$? at ${SECONDS}s $(grep -oE 'completion: [^;]*' "$L/$n.txt")"; grep -E '^tokens' "$L/$n.txt" | cut -c1-120
}
for v in 8 4; do
	run strata-w16 w16-$v --vram ${v}GiB -n 1024 -p "$P" --stats-every 128
	run strata-w32 w32-$v --vram ${v}GiB -n 1024 -p "$P" --stats-every 128
done
