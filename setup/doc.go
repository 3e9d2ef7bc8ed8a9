// Package setup will hold the host checks shared by `strata setup check`
// and the daemon (IOMMU, VFIO, ACS, memlock, hugepages; issue 7). Today the
// directory holds the scripts that install strata's build dependencies and
// run its tests.
package setup
