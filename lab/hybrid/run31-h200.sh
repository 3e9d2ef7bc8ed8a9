#!/usr/bin/env bash
# Device call for whichever card comes: on an H200 (the host issue 20's
# figures are defined on), its figures first (run28-h200.sh: bench cpu,
# then bench engine --only streamed,70b against docs/peers-h200.json),
# then as much of lab/moe/run53-h200.sh (issue 25's served batch and its
# llama.cpp batch-8 peer on the same host) as LIMIT (default 560) leaves;
# on an H100, run53 alone. Carry bin/gpu-tests.txz and bin/llama-src.txz.
set -uo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${LIMIT:-560}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu"
case $gpu in
*H200*)
	bash lab/hybrid/run28-h200.sh
	echo "== run28 done at ${SECONDS}s"
	left=$((LIMIT - SECONDS))
	[ "$left" -gt 200 ] && OUT=${OUT:-h200-logs}/run53 LIMIT=$left bash lab/moe/run53-h200.sh ;;
*) LIMIT=$LIMIT bash lab/moe/run53-h200.sh ;;
esac
