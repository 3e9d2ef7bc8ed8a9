// Package devices stores layer pools on the strata volumes of NVMe
// controllers the daemon has claimed: a pool is written as a volume extent
// and read back against its checksum before anyone is told it exists.
// Finding, claiming and releasing the controllers is package nvmehost's
// (light, sysfs only, so the unprivileged client can link it); this
// package needs the NVMe driver's volume layer.
package devices
