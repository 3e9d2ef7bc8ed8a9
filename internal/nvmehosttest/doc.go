// Package nvmehosttest builds fake sysfs and procfs trees of NVMe
// controllers under a test's temporary directory, laid out as Linux lays
// out /sys and /proc, so that nvmehost and the code above it (the daemon's
// device API, `strata devices`) are tested against the same layout without
// the real /sys. Each test describes its own host with these few builders.
package nvmehosttest
