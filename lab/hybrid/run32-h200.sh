#!/usr/bin/env bash
# Device call for whichever card comes, with one bundle (bin/gpu-tests.txz
# holding both gpu-tests/ and run55's ab/: the tree and two bundles passed
# the carry limit): on an H200 (the host issue 20's figures are defined
# on), run28-h200.sh's figures alone; on an H100, lab/moe/run55-h200.sh
# (issue 25's served batch A/B) with LIMIT (default 470).
set -uo pipefail
cd "$(dirname "$0")/../.."
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== card: $gpu, $(nproc) cpus"
case $gpu in
*H200*) bash lab/hybrid/run28-h200.sh ;;
*) LIMIT=${LIMIT:-470} bash lab/moe/run55-h200.sh ;;
esac
