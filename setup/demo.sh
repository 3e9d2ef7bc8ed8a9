#!/usr/bin/env bash
# The README's first command: build strata, start stratad on the default
# model (stories260K, a tiny trained story model embedded in the binaries and
# written to ~/.cache/strata), have it continue "Once upon a time" with
# `strata complete` and answer one chat message with `strata chat` through
# the Unix socket, and stop the daemon. Pass a message as $1 to change it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=$(setup/deps.sh)
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0
mkdir -p bin
"$GO" build -o bin/stratad ./tools/stratad
"$GO" build -o bin/strata ./tools/strata

tmp=$(mktemp -d)
sock="$tmp/strata.sock"
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

bin/stratad --socket "$sock" --default-model --socket-group "" --log-format text 2>"$tmp/stratad.log" &
pid=$!
for _ in $(seq 1 300); do
	[ -S "$sock" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$tmp/stratad.log" >&2
		echo "demo: stratad failed to start" >&2
		exit 1
	fi
	sleep 0.1
done
[ -S "$sock" ] || { cat "$tmp/stratad.log" >&2; echo "demo: no socket after 30 s" >&2; exit 1; }

echo "== stratad is serving on $sock; models:"
bin/strata models --socket "$sock"
echo "== strata complete: Once upon a time"
printf 'Once upon a time'
bin/strata complete --socket "$sock" --max-tokens 48 --temperature 0 "Once upon a time"
msg=${1:-"Tell me a story."}
echo "== strata chat: $msg"
echo "$msg" | bin/strata chat --socket "$sock" --max-tokens 32 --temperature 0
echo "== strata status"
bin/strata status --socket "$sock"

kill -TERM "$pid"
wait "$pid"
pid=""
echo "== stratad stopped cleanly"
