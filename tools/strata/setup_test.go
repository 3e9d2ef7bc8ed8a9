package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/strata-llm/strata/setup/hostcheck"
)

// TestSetupCheckCLI drives `strata setup check` on this machine: the JSON
// report parses, the exit status is 1 exactly when a check fails, and the
// text form carries the same verdicts.
func TestSetupCheckCLI(t *testing.T) {
	t.Parallel()
	bin := buildStrata(t)
	out, stderr, code := runStrata(t, bin, "", "setup", "check", "--json")
	var rep hostcheck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s\n%s", err, out, stderr)
	}
	if len(rep.Results) == 0 || rep.Route.Kind == "" {
		t.Fatalf("empty report: %+v", rep)
	}
	want := 0
	if rep.Worst() == hostcheck.Fail {
		want = 1
	}
	if code != want {
		t.Errorf("exit %d, want %d (worst %s)", code, want, rep.Worst())
	}
	text, _, code2 := runStrata(t, bin, "", "setup", "check")
	if code2 != code {
		t.Errorf("text exit %d, json exit %d", code2, code)
	}
	for _, r := range rep.Results {
		if !strings.Contains(text, strings.ToUpper(string(r.Status))+"  "+r.ID) {
			t.Errorf("text lacks %s %s:\n%s", r.Status, r.ID, text)
		}
	}
	if !strings.Contains(text, "route: "+rep.Route.Kind) {
		t.Errorf("text lacks the route:\n%s", text)
	}
	if _, _, code := runStrata(t, bin, "", "setup", "check", "extra"); code != exitUsage {
		t.Errorf("extra argument: exit %d, want %d", code, exitUsage)
	}
}
