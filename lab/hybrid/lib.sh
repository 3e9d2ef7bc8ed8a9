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
