// Package buildinfo says which build of strata is running: the version set
// at link time for releases, and the source revision the Go toolchain
// stamped. It imports nothing of strata's, so the client links it without
// the daemon.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, set at link time
// (-ldflags "-X github.com/strata-llm/strata/internal/buildinfo.Version=v1.2.3");
// "dev" otherwise.
var Version = "dev"

// Build describes the running binary: Version (set at link time for
// releases, "dev" otherwise), the source revision and its time from the
// Go toolchain's VCS stamp, whether the tree had uncommitted changes, and
// the Go version.
type Build struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

// Read reads the binary's build.
func Read() Build {
	b := Build{Version: Version, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// String is the one-line form --version prints: "dev (rev 1a2b3c4d5e6f,
// 2026-12-02T01:00:00Z, modified; go1.26.8)".
func (b Build) String() string {
	s := b.Version
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (rev " + rev
		if b.Time != "" {
			s += ", " + b.Time
		}
		if b.Modified {
			s += ", modified"
		}
		return fmt.Sprintf("%s; %s)", s, b.GoVersion)
	}
	return fmt.Sprintf("%s (%s)", s, b.GoVersion)
}
