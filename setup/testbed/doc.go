// Package testbed is the guest side of strata's VM test-bed (run.sh): it
// tells an integration test whether it runs inside the test-bed guest, which
// devices and files the guest has, what the host pre-filled the NVMe images
// with, and it lets a test hand the host bytes to verify in the backing files
// after the guest powers off, or have the host run a QEMU monitor command
// while the test runs (Monitor: a fault at the moment the test picks). Tests
// of vfio/, nvme/, p2p/ and the daemon's device tests import it.
package testbed
