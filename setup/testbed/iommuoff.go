package testbed

import (
	"os"
	"testing"
)

// IOMMUOffEnv is the variable init.sh sets to "off" in the test-bed's
// second boot, the one without an emulated IOMMU (no intel-iommu device,
// intel_iommu=off): there VFIO cannot work, the NVMe controllers stay on the
// kernel's nvme driver, and only tests that call RequireIOMMUOff run.
const IOMMUOffEnv = "STRATA_TESTBED_IOMMU"

// RequireIOMMUOff skips the test unless it runs inside the test-bed's
// IOMMU-off boot, and returns the guest description. Checks that must see a
// host without an IOMMU (strata setup check) use it; Require, which needs
// /dev/vfio, skips there.
func RequireIOMMUOff(t testing.TB) Guest {
	t.Helper()
	if os.Getenv("STRATA_TESTBED") != "1" {
		t.Skip("needs the VM test-bed (setup/testbed/run.sh sets STRATA_TESTBED=1 inside the guest)")
	}
	if os.Getenv(IOMMUOffEnv) != "off" {
		t.Skip("needs the test-bed's IOMMU-off boot (run.sh's second boot sets " + IOMMUOffEnv + "=off)")
	}
	g, err := FromEnv()
	if err != nil {
		t.Fatalf("test-bed environment: %v", err)
	}
	return g
}
