#!/usr/bin/env bash
# Runs every test strata has: vet, the unit and integration tests, the
# every package again under the race detector, and a short pass of each fuzz
# target over its corpus. GPU and VM tests skip with a message where the
# hardware is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=$(setup/deps.sh)
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
echo "== go vet" >&2
"$GO" vet ./...
echo "== go test" >&2
"$GO" test -count=1 -timeout 30m ./...
echo "== go test -race ./..." >&2
CGO_ENABLED=1 "$GO" test -count=1 -race -timeout 30m ./...
echo "== VM test-bed (QEMU guest: vfio, nvme, p2p as root behind an emulated IOMMU)" >&2
bash setup/testbed/run.sh
