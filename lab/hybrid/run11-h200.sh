#!/usr/bin/env bash
# Device call: the hidden state's hand-over beside bulk copies (copy
# engine vs a kernel on mapped pinned memory), then issue 25's MoE bench.
. "$(dirname "$0")/lib.sh"
(cd engine/gpu && timeout 60 "$B/engine-gpu.test" -test.run XXX -test.bench HandoffBesideBulk -test.benchtime 1x -test.v) >"$L/handoff.log" 2>&1
grep -E "hand-over|ok|FAIL|panic" "$L/handoff.log"
bash lab/moe/run-h200.sh
