#!/usr/bin/env bash
# Device call: speculative decoding on the GPU, gocode-29m with a VRAM
# budget that streams 15 of its 16 layers (strata plan --vram 113MiB):
# plain, prompt lookup, the draft model (where the target runs) and the
# self-drafter (4 layers), two prompts, 128 greedy tokens each; the outputs must be identical
# to plain decoding's. Needs bin/models/{gocode,draft}.part0[01] (xz of
# ../shared/models' two gocode files, split to fit the device tool's carry).
. "$(dirname "$0")/lib.sh"
G=$S/gocode-29m-f16.gguf D=$S/gocode-draft-20m-f16.gguf
M=bin/models
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], 'wb'))" "$1"; }
[ -f "$G" ] || cat $M/gocode.part00 $M/gocode.part01 | unxz "$G"
[ -f "$D" ] || cat $M/draft.part00 $M/draft.part01 | unxz "$D"
P1='// Copy copies n bytes from src to dst and returns how many it copied.
func Copy(dst io.Writer, src io.Reader, n int64) (int64, error) {
	buf := make([]byte, 32*1024)
	var written int64
	for written < n {'
P2='func TestTrim(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty", in: "", want: ""},
		{name: "space", in: " a ", want: "a"},
		{name: "tabs", in: "\ta\t", want: "a"},'
log=$L/spec.log
for p in 1 2; do
	[ $p = 1 ] && P=$P1 || P=$P2
	for h in "" --no-hybrid; do
		for m in plain lookup draft self; do
			a=""; [ $m = lookup ] && a=--lookup; [ $m = draft ] && a="--draft $D"; [ $m = self ] && a="--self-draft 4"
			for r in 1; do
				"$B/strata" run -m "$G" --backend cuda --vram 113MiB --ctx 512 -n 128 -p "$P" --stats $h $a >"$S/out-$p-$m$h-$r.txt" 2>"$S/stats.txt"
				echo "== prompt $p $m$h run $r rc=$? $(grep -E 'completion|specul|backend' "$S/stats.txt" | tr '\n' '|' | cut -c1-330)" | tee -a $log
			done
			cmp -s "$S/out-$p-plain$h-1.txt" "$S/out-$p-$m$h-1.txt" && echo "prompt $p $m$h: same text as plain" | tee -a $log || echo "prompt $p $m$h: DIFFERS from plain" | tee -a $log
		done
	done
	cp "$S/out-$p-plain-1.txt" "$L/out-prompt$p.txt"
done
