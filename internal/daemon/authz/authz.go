package authz

import (
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"

	"github.com/strata-llm/strata/internal/daemon/peer"
)

// Action is something a peer asks the daemon to do.
type Action int

// Actions, from least to most privileged.
const (
	Infer      Action = iota // run a completion
	ReadState                // list models, read status and metrics
	Load                     // load a model
	Unload                   // unload a model
	BindDevice               // bind an NVMe or GPU to the daemon
	WritePool                // write a layer pool (prefab onto NVMe or a file)
)

var actionNames = [...]string{"infer", "read-state", "load", "unload", "bind-device", "write-pool"}

// String names the action for errors and logs.
func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// Privileged reports whether the action needs an administrator.
func (a Action) Privileged() bool { return a >= Load }

// ErrForbidden is returned (wrapped) when a peer may not perform an action.
var ErrForbidden = errors.New("permission denied")

// Peer is who sent a request, as far as the daemon can tell.
type Peer struct {
	// Unix is true when the request came over the Unix socket and Cred
	// holds the kernel's credentials for the connection.
	Unix bool
	Cred peer.Cred
	// APIKey is true when the request came over TCP with a valid API key.
	// TCP peers have no kernel identity and are never administrators.
	APIKey bool
	// Addr is a TCP peer's address, for logs and per-peer limits.
	Addr string
}

// String describes the peer for logs.
func (p Peer) String() string {
	if p.Unix {
		return fmt.Sprintf("unix(pid=%d uid=%d gid=%d)", p.Cred.PID, p.Cred.UID, p.Cred.GID)
	}
	switch {
	case p.APIKey && p.Addr != "":
		return "tcp(" + p.Addr + " api-key)"
	case p.APIKey:
		return "tcp(api-key)"
	case p.Addr != "":
		return "tcp(" + p.Addr + " no key)"
	}
	return "unknown"
}

// Policy holds the configured rules.
type Policy struct {
	// AdminGID is the admin group's gid; -1 means only root is an admin.
	AdminGID int
	// ProcRoot is where the peer's /proc/PID/status is read ("/proc").
	ProcRoot string
}

// NewPolicy looks up the admin group by name. A group that does not exist
// leaves only root as administrator; the returned warning says so, for the
// caller to log.
func NewPolicy(adminGroup string) (p Policy, warning string) {
	p = Policy{AdminGID: -1, ProcRoot: "/proc"}
	if adminGroup == "" {
		return p, "no admin group configured: only root may load and unload models"
	}
	if gid, err := strconv.Atoi(adminGroup); err == nil {
		p.AdminGID = gid
		return p, ""
	}
	g, err := user.LookupGroup(adminGroup)
	if err != nil {
		return p, fmt.Sprintf("admin group %q not found (%v): only root may load and unload models", adminGroup, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return p, fmt.Sprintf("admin group %q has non-numeric gid %q: only root may load and unload models", adminGroup, g.Gid)
	}
	p.AdminGID = gid
	return p, ""
}

// IsAdmin reports whether a peer is an administrator: a Unix peer with uid
// 0, or whose primary or supplementary groups include AdminGID. Failure to
// read the peer's groups denies.
func (p Policy) IsAdmin(pr Peer) (bool, error) {
	if !pr.Unix {
		return false, nil
	}
	if pr.Cred.UID == 0 {
		return true, nil
	}
	if p.AdminGID < 0 {
		return false, nil
	}
	if pr.Cred.GID == p.AdminGID {
		return true, nil
	}
	root := p.ProcRoot
	if root == "" {
		root = "/proc"
	}
	groups, err := peer.Groups(root, pr.Cred)
	if err != nil {
		return false, err
	}
	return slices.Contains(groups, p.AdminGID), nil
}

// Allow returns nil when pr may perform a, and an error wrapping
// ErrForbidden otherwise.
func (p Policy) Allow(pr Peer, a Action) error {
	if !a.Privileged() {
		if pr.Unix || pr.APIKey {
			return nil
		}
		return fmt.Errorf("%s by %s: %w", a, pr, ErrForbidden)
	}
	ok, err := p.IsAdmin(pr)
	if err != nil {
		return fmt.Errorf("%s by %s: cannot establish groups (%v): %w", a, pr, err, ErrForbidden)
	}
	if !ok {
		return fmt.Errorf("%s by %s: needs uid 0 or the admin group: %w", a, pr, ErrForbidden)
	}
	return nil
}
