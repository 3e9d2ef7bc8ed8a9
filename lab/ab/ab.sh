#!/usr/bin/env bash
# Same-run A/B of two strata binaries on the GPU host: `strata bench engine`
# alternating old and new, ROUNDS rounds each, one JSON report per run, then
# compare.py's table (median of each side, new / old).
#   lab/ab/ab.sh OLD NEW [ROUNDS] [SCENARIOS]
# Writes to $OUT (or ./ab-out): old-N.json, new-N.json, ab.txt.
set -uo pipefail
old=$1 new=$2 rounds=${3:-3} only=${4:-resident,streamed,70b}
out=${OUT:-ab-out}; synth=${SYNTH:-/dev/shm}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
	for side in old new; do
		bin=$old; [ $side = new ] && bin=$new
		echo "== round $r $side" >&2
		"$bin" bench engine --synth-dir "$synth" --only "$only" -q --json-file "$out/$side-$r.json" >"$out/$side-$r.txt" 2>&1 \
			|| { echo "$side round $r failed:" >&2; tail -20 "$out/$side-$r.txt" >&2; }
	done
done
python3 "$(dirname "$0")/compare.py" "$out" | tee "$out/ab.txt"
