# Sourced by the A/B device scripts here: run from the checkout's root,
# logs to $L ($OUT on the device machine), synthetic models in $S, the
# binaries of bin/ab.txz unpacked in $B.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
L=${OUT:-h200-logs} S=/dev/shm
mkdir -p "$L"
[ -d bin/ab ] || tar xJf bin/ab.txz -C bin || exit 2
B=$PWD/bin/ab
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64}
