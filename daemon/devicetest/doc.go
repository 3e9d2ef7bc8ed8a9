// Package devicetest holds the test-bed integration test of stratad's
// device API (daemon/devices.go): inside the QEMU guest of
// setup/testbed, as root, it serves the daemon in-process on a Unix
// socket and, only through the client, takes the spare NVMe controller
// from the kernel, formats a strata volume on it, writes a prefab pool,
// reads the counters and gives the controller back. It has no code of its
// own: it is a separate package so that the guest runs just this test and
// not the whole daemon suite.
package devicetest
