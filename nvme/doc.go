// Package nvme will drive NVMe controllers from userspace over vfio:
// bring-up, admin and I/O queue pairs, PRP lists, completions, timeouts and
// typed status errors (issue 6). Not implemented yet; the directory fixes the
// design card's layout.
package nvme
