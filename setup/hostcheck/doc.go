// Package hostcheck answers the first question of anyone deploying strata —
// will VFIO and peer-to-peer DMA work on this machine, and if not, why not
// and what to change — with checks that read sysfs, procfs and /dev and
// change nothing. `strata setup check`, setup/check-host.sh (for hosts
// without strata installed) and the daemon share this one implementation.
//
// Check returns a Report: one Result per fact (pass, warn or fail, and the
// fix), and the DMA route the daemon would pick for tier-C reads and why.
// Every path is read under Options.Root, so the checks are tested against
// fake host trees (setup/internal/fakehost) as well as the real machine and
// the VM test-bed.
//
// The host scripts (vfio-bind.sh for persistent vfio-pci binding,
// hugepages.sh, socket-group.sh, and the install, demo and test scripts)
// live one directory up, in setup/, with their tests.
package hostcheck
