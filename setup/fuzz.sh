#!/usr/bin/env bash
# Runs strata's fuzz targets, each for a chosen time, and prints a table of
# executions per target. go test already runs every target's seed corpus
# (testdata/fuzz included) on each test run; this is the long run.
#
#   setup/fuzz.sh [TIME] [REGEXP] [PARALLEL] [MINIMIZE]
#       TIME per target (default 60s, or a count like 1000000x); REGEXP picks
#       targets by name or package (default: all); PARALLEL is the number of
#       fuzzing processes (default: one per CPU; 1 on a shared machine);
#       MINIMIZE bounds the minimisation of each new input (default 10x).
#
# Go minimises every input that finds new code for up to 60s by default,
# counting no executions meanwhile: targets that keep finding new inputs
# (the model load, the host files) then spend most of a run there, so the
# default here is 10 executions.
#
# exec/s is over the target's fuzzing time (go test's last "elapsed", the
# build and the seed corpus before it left out), minimisation included.
#
# A failing input is written under the package's testdata/fuzz/TARGET/ by
# go test: commit it, fixed, as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=$(setup/deps.sh)
export GOFLAGS=${GOFLAGS:--buildvcs=false}
time=${1:-60s}
filter=${2:-.}
parallel=()
if [ -n "${3:-}" ]; then
	parallel=(-parallel "$3")
fi
minimize=${4:-10x}
status=0
printf '%-44s %-26s %12s %8s %s\n' package target execs exec/s result
while IFS=: read -r file fn; do
	name=${fn#func }
	name=${name%%(*}
	pkg=$(dirname "$file") # ./dir
	if ! printf '%s %s\n' "$pkg" "$name" | grep -Eq -- "$filter"; then
		continue
	fi
	log=$(mktemp)
	if "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$time" -fuzzminimizetime "$minimize" "${parallel[@]}" "$pkg" >"$log" 2>&1; then
		result=ok
	else
		result=FAIL
		status=1
	fi
	execs=$(grep -Eo 'execs: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
	# "elapsed: 1h2m3s" in seconds
	took=$(grep -Eo 'elapsed: [0-9hms]+' "$log" | tail -1 | cut -d' ' -f2 |
		sed -E 's/([0-9]+)h/\1*3600+/; s/([0-9]+)m/\1*60+/; s/([0-9]+)s/\1/; s/\+$//' || true)
	rate=?
	if [ -n "$execs" ] && [ -n "$took" ] && [ "$((took))" -gt 0 ]; then
		rate=$((execs / (took)))
	fi
	printf '%-44s %-26s %12s %8s %s\n' "$pkg" "$name" "${execs:-?}" "$rate" "$result"
	if [ "$result" = FAIL ]; then
		sed 's/^/    /' "$log" | grep -v 'fuzz: elapsed' | tail -20
	fi
	rm -f "$log"
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '^./.git' | sort)
exit $status
