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
