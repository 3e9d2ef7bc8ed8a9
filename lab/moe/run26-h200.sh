#!/usr/bin/env bash
# Device call: run24's (tests, then bench) on a later tree: run25 the split
# by fitted fixed costs and rates (run24: by rates alone), run26 the fits
# explored one layer in 8. Carry bin/gpu-tests.txz.
exec bash "$(dirname "$0")/run24-h200.sh" "$@"
