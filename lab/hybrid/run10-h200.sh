#!/usr/bin/env bash
# Device call: the byte ring (streamed layers laid out by bytes, copies
# fenced on the last layer they overwrite) against the slot ring of the
# binary before it (bin/gpu-tests/strata-old, a124d62), same run, 70b in
# 24 GiB: new, old, then new again if time allows.
. "$(dirname "$0")/lib.sh"
for v in new:$B/strata old:$B/strata-old; do
	n=${v%%:*} s=${v#*:}
	timeout 270 "$s" bench engine --synth-dir $S --only 70b --peers docs/peers-h200.json \
		--json-file "$L/bench-70b-$n.json" >"$L/bench-70b-$n.txt" 2>&1
	echo "== $n rc=$?"
	grep -E "hybrid|goals|  decode, batch|H2D during decode|copy engine|memory read" "$L/bench-70b-$n.txt" | cut -c1-260
done
