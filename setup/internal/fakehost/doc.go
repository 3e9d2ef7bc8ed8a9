// Package fakehost builds fake host trees (sysfs, procfs and /dev as a
// host shows them) for the host checks' and the host scripts' tests. The
// host descriptions are embedded, so the tests that use them also run in
// the VM test-bed guest, where only test binaries are copied.
package fakehost
