#!/usr/bin/env bash
# Installs what building and testing strata needs on Debian 12 and prints the
# go command to use. Idempotent: does nothing when a usable Go is present.
# Go: strata's go.mod asks for Go 1.26; any go >= 1.21 fetches that exact
# toolchain from the Go module proxy by itself (GOTOOLCHAIN=auto), so on a
# machine without one we install Debian's golang-1.23 from bookworm-backports.
set -euo pipefail
need_root() { if [ "$(id -u)" -ne 0 ]; then echo "sudo"; fi; }
SUDO=$(need_root)

pick_go() {
  for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go-1.23/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] || continue
    v=$("$g" env GOVERSION 2>/dev/null | sed 's/^go//') || continue
    major=${v%%.*}; rest=${v#*.}; minor=${rest%%.*}
    if [ "$major" -gt 1 ] || [ "$minor" -ge 21 ]; then echo "$g"; return 0; fi
  done
  return 1
}

missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)   # the race detector needs cgo
command -v g++ >/dev/null || missing+=(g++)            # kernels' host build of CUDA code (TestHostBuildQ6KA)
command -v git >/dev/null || missing+=(git)
if ! pick_go >/dev/null; then
  if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/strata-backports.list >/dev/null
  fi
  missing+=(golang-1.23-go)
fi
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi
pick_go
