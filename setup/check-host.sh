#!/bin/sh
# Checks a host for strata (IOMMU, VFIO, ACS, memlock, hugepages, GPU driver,
# the DMA route the daemon would use) on a machine where strata is not
# installed. It runs the same Go code as `strata setup check` — the checks are
# not re-implemented here: with Go available it builds the strata client from
# this checkout (a static binary, cached) and runs it; without Go it runs a
# strata binary found in bin/ of the checkout or on PATH (copy one built
# elsewhere with `CGO_ENABLED=0 go build -o strata ./tools/strata`).
#
#   setup/check-host.sh [--json]        arguments go to `strata setup check`
#
# Run it as root to see ACS settings (extended PCI config space). Exit status
# is the check's: 0 when nothing fails, 1 when a check fails.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

find_go() {
  for g in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go-1.23/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] && { printf '%s' "$g"; return 0; }
  done
  return 1
}

bin=
if go=$(find_go) && [ -f "$top/go.mod" ]; then
  cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/check-host
  mkdir -p "$cache"
  (cd "$top" && CGO_ENABLED=0 "$go" build -o "$cache/strata" ./tools/strata) >&2 ||
    { echo "check-host: building strata with $go failed" >&2; exit 1; }
  bin=$cache/strata
elif [ -x "$top/bin/strata" ]; then
  bin=$top/bin/strata
elif command -v strata >/dev/null 2>&1; then
  bin=$(command -v strata)
else
  echo "check-host: no Go toolchain and no strata binary: install Go (setup/deps.sh), or copy a strata binary built with" >&2
  echo "  CGO_ENABLED=0 go build -o strata ./tools/strata   into $top/bin/" >&2
  exit 1
fi
exec "$bin" setup check "$@"
