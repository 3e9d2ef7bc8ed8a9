#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is needed, build
# strata, and run it on the embedded default model (stories260K, a tiny trained
# story model, so nothing is downloaded). Extra arguments go to `strata run`.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=$(setup/deps.sh)
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
CGO_ENABLED=0 "$GO" build -o bin/ ./tools/strata ./tools/stratad
echo "built bin/strata; running: bin/strata run --stats $*" >&2
exec bin/strata run --stats "$@"
