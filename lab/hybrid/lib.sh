# Sourced by the device scripts here: run from the checkout's root, logs to
# $L ($OUT on the device machine), synthetic and carried models in $S, the
# test binaries of setup/gpu-tests.sh in $B (unpacked afresh: a warm
# machine keeps an older call's), and bin/ab.txz's A/B binaries in bin/ab
# when it is there.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
L=${OUT:-h200-logs}
mkdir -p "$L"
S=/dev/shm
tar xJf bin/gpu-tests.txz -C bin || exit 2
[ ! -f bin/ab.txz ] || tar xJf bin/ab.txz -C bin || exit 2
B=$PWD/bin/gpu-tests
# STRATA=path (an A/B binary, e.g. bin/ab/strata-ring) stands in for the
# bundle's strata: a call that benches the variant an earlier call chose.
[ -z "${STRATA:-}" ] || cp "$STRATA" "$B/strata" || exit 2
# served V GIB: the served batch of Qwen3-30B-A3B Q4_K_M at GIB GiB (8
# requests of 128 tokens through the daemon's scheduler) by
# bin/ab/strata-V, its output appended to $L/served.txt under a line
# "== V GIB GiB", then its summary rows.
served() {
	local v=$1 gib=$2
	echo "== $v $gib GiB" >>"$L/served.txt"
	timeout 100 bin/ab/strata-$v bench engine --synth-dir $S --only moe --moe-cases qwen3moe-30b-a3b-${gib}GiB \
		--moe-fixed=false --moe-served 0 --moe-served-batch 8 >>"$L/served.txt" 2>&1
	echo "== $v $gib GiB rc=$? at ${SECONDS}s"
	tac "$L/served.txt" | sed '/^== /q' | tac | grep -E '^ +(served decode|CPU|the host|hand-overs|the CPU|batch layers|of the hand)' | cut -c1-44,100-124
}
