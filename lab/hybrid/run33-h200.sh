#!/usr/bin/env bash
# Device call for whichever card comes (written in session 58), carrying
# the bundle of `bash lab/bundle.sh pre=2c47bcf`: on an H200 (the host
# issue 20's figures are defined on), run28-h200.sh's figures on main
# (whose hybrid passes now wait for the device asleep, DoSleeping), then
# lab/moe/run57-h200.sh with what LIMIT (default 560) leaves; elsewhere
# run57 alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${LIMIT:-560}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
case $gpu in
*H200*)
	bash lab/hybrid/run28-h200.sh
	echo "== run28 done at ${SECONDS}s"
	left=$((LIMIT - SECONDS))
	[ "$left" -gt 60 ] && LIMIT=$left bash lab/moe/run57-h200.sh ;;
*) LIMIT=$((LIMIT < 200 ? LIMIT : 200)) bash lab/moe/run57-h200.sh ;;
esac
