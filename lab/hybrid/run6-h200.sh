#!/usr/bin/env bash
# Device call (after the early-exit GPU tests, run alone: the carry is
# too small for both): gocode-29m resident on the GPU
# with the self-drafter on the GPU (4 and 8 layers), outputs compared with
# plain decoding. Needs bin/models/gocode.part0[01].
. "$(dirname "$0")/lib.sh"
G=$S/gocode-29m-f16.gguf M=bin/models
[ -f "$G" ] || cat $M/gocode.part00 $M/gocode.part01 | python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], 'wb'))" "$G"
P='func TestTrim(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty", in: "", want: ""},'
for v in "" 113MiB; do
	for a in "" "--self-draft 4" "--self-draft 8" "--self-draft 1"; do
		vr=""; [ -n "$v" ] && vr="--vram $v"
		"$B/strata" run -m "$G" --backend cuda $vr --ctx 512 -n 128 -p "$P" --stats $a >"$S/o.txt" 2>"$S/s.txt"
		echo "== vram[$v] $a rc=$? $(md5sum <"$S/o.txt" | cut -c1-8) $(grep -E 'completion|specul' "$S/s.txt" | tr '\n' '|' | cut -c1-300)"
	done
done
