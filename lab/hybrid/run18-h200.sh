#!/usr/bin/env bash
# Device call: the 8b half hybrid (bench engine --only streamed) three
# times with this tree (bin/ab/strata-new) and once with c73443a
# (bin/ab/strata-old), for the spread of the combined-link ratio. Needs
# only bin/ab.txz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
L=${OUT:-h200-logs}
mkdir -p "$L"
S=/dev/shm
tar xJf bin/ab.txz -C bin || exit 2
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
for v in new old new new; do
	timeout 70 "bin/ab/strata-$v" bench engine --synth-dir $S --only streamed --peers docs/peers-h200.json >>"$L/bench-$v.txt" 2>&1
	echo "== $v rc=$?"; grep -E "hybrid|H2D during|time per decode pass " "$L/bench-$v.txt" | tail -9 | grep -v "s\]" | cut -c1-330
done
