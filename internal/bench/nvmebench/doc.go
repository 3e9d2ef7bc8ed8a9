// Package nvmebench runs package bench's storage sweep and end-to-end
// route on a namespace read through strata's userspace NVMe driver. Only
// stratad uses it — the driver needs root and VFIO, and the unprivileged
// client must not link it — with controllers it holds; tests use the
// software controller of internal/nvmetest.
package nvmebench
