#!/usr/bin/env bash
# Device call: speculative decoding on the GPU, gocode-29m with a VRAM
# budget that streams 15 of its 16 layers (strata plan --vram 113MiB):
# plain, prompt lookup and the draft model (on the CPU), with and without
# the hybrid, 128 greedy tokens each; the outputs must be identical.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=${OUT:-h200-logs}
mkdir -p "$L"
S=/dev/shm
B=$PWD/bin/gpu-tests
G=$S/gocode-29m-f16.gguf D=$S/gocode-draft-20m-f16.gguf
M=bin/models
[ -f "$G" ] || cat $M/gocode.part00 $M/gocode.part01 | python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], \"wb\"))" "$G"
[ -f "$D" ] || cat $M/draft.part00 $M/draft.part01 | python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], \"wb\"))" "$D"
ls -la $S
P='// Copy copies n bytes from src to dst and returns how many it copied.
func Copy(dst io.Writer, src io.Reader, n int64) (int64, error) {
	buf := make([]byte, 32*1024)
	var written int64
	for written < n {'
for h in "" --no-hybrid; do
	for m in plain lookup draft; do
		a=""; [ $m = lookup ] && a=--lookup; [ $m = draft ] && a="--draft $D"
		for r in 1 2; do
			"$B/strata" run -m "$G" --backend cuda --vram 113MiB --ctx 512 -n 128 -p "$P" --stats $h $a >"$L/out-$m$h-$r.txt" 2>"$L/stats-$m$h-$r.txt"
			echo "== $m$h-$r rc=$? $(grep -iE 'decode|accept|draft' "$L/stats-$m$h-$r.txt" | tr '\n' ' ' | cut -c1-300)"
		done
	done
	for m in lookup draft; do cmp -s "$L/out-plain$h-1.txt" "$L/out-$m$h-1.txt" && echo "$m$h: same text as plain" || echo "$m$h: DIFFERS from plain"; done
done
head -c 600 "$L/out-plain-1.txt"
