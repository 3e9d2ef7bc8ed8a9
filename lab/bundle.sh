#!/usr/bin/env bash
# Builds the one bundle the device scripts carry, bin/gpu-tests.txz:
# gpu-tests/ (strata, engine-model.test and engine-gpu.test from the work
# tree, what lab/hybrid/lib.sh's $B needs) and ab/ (ab/strata-main, the
# work tree's strata, and ab/strata-NAME for each NAME=REV argument, built
# at commit REV in a scratch worktree, or, where REV is a .patch file, at
# HEAD with that patch applied). One xz stream with a wide
# dictionary: the binaries share most of their bytes (the embedded PTX),
# so four of them cost little more than one, and the tracked tree with
# two bundles passed the device tool's carry limit.
#
#   bash lab/bundle.sh pre=2c47bcf ahead1=lab/moe/ahead1.patch
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
T=$(mktemp -d)
trap 'rm -rf "$T"; git worktree prune' EXIT
mkdir -p "$T/gpu-tests" "$T/ab" bin
go build -ldflags='-s -w' -o "$T/gpu-tests/strata" ./tools/strata
cp "$T/gpu-tests/strata" "$T/ab/strata-main"
go test -c -ldflags='-s -w' -o "$T/gpu-tests/engine-model.test" ./engine/model
go test -c -ldflags='-s -w' -o "$T/gpu-tests/engine-gpu.test" ./engine/gpu
for a in "$@"; do
	name=${a%%=*} rev=${a#*=}
	case $rev in
	*.patch)
		git worktree add -q --detach "$T/src-$name" HEAD
		git -C "$T/src-$name" apply "$PWD/$rev" ;;
	*) git worktree add -q --detach "$T/src-$name" "$rev" ;;
	esac
	(cd "$T/src-$name" && go build -ldflags='-s -w' -o "$T/ab/strata-$name" ./tools/strata)
	git worktree remove --force "$T/src-$name"
done
tar cf - -C "$T" gpu-tests ab | xz -T0 -9 --lzma2=dict=192MiB >bin/gpu-tests.txz
ls -l bin/gpu-tests.txz >&2
