#!/bin/busybox sh
# PID 1 of the strata test-bed guest: mounts the pseudo filesystems, loads
# the VFIO and NVMe modules, binds the test devices to vfio-pci, runs every
# test binary listed in /tests/list and powers off. The host reads the
# TESTBED-* lines from the serial console (setup/testbed/bedcheck).
# With strata_testbed_iommu=off on the kernel command line (run.sh's second
# boot, no emulated IOMMU) it loads no VFIO module, leaves the test devices
# to the kernel's nvme driver and runs /tests/list-iommu-off instead.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages
echo 64 > /proc/sys/vm/nr_hugepages   # 128 MiB of 2 MiB pages for p2p.HostPinned
set -a; . /testbed.env; set +a
export HOME=/tmp TMPDIR=/tmp
iommu=on list=/tests/list
for arg in $(cat /proc/cmdline); do
  [ "$arg" = strata_testbed_iommu=off ] && iommu=off list=/tests/list-iommu-off
done
[ $iommu = off ] && export STRATA_TESTBED_IOMMU=off

die() { echo "TESTBED-ERROR $*"; echo "TESTBED-DONE pass=0 fail=1"; poweroff -f; }

for m in $(cat /lib/modules/order); do
  case "$iommu:$m" in off:vfio*|off:irqbypass*) continue ;; esac
  insmod "/lib/modules/$m" || die "insmod $m"
  # vfio-pci must own the test devices before nvme.ko can claim them
  if [ "$m" = vfio-pci.ko ]; then
    for bdf in $STRATA_TESTBED_NVME0 $STRATA_TESTBED_NVME1 $STRATA_TESTBED_IVSHMEM ${STRATA_TESTBED_MODELS_NVME:-}; do
      echo vfio-pci > "/sys/bus/pci/devices/$bdf/driver_override" || die "override $bdf"
      echo "$bdf" > /sys/bus/pci/drivers_probe
      [ "$(basename "$(readlink "/sys/bus/pci/devices/$bdf/driver")")" = vfio-pci ] || die "bind $bdf to vfio-pci"
    done
  fi
done
if [ $iommu = off ]; then
  # nvme.ko probes asynchronously: wait (≤ 10 s) until it owns both controllers
  for i in $(seq 100); do
    n=0
    for bdf in $STRATA_TESTBED_NVME0 $STRATA_TESTBED_NVME1; do
      [ "$(basename "$(readlink "/sys/bus/pci/devices/$bdf/driver")")" = nvme ] && n=$((n + 1))
    done
    [ $n = 2 ] && break
    sleep 0.1
  done
  [ $n = 2 ] || die "nvme did not bind $STRATA_TESTBED_NVME0 and $STRATA_TESTBED_NVME1"
fi
# testbed.Monitor's port to the host's hook relay: raw, no echo
[ -n "${STRATA_TESTBED_HOOKS:-}" ] && { stty -F "$STRATA_TESTBED_HOOKS" raw -echo 2>/dev/null || true; }
echo "TESTBED-BOOTED kernel=$(uname -r) iommu=$iommu uptime=$(cut -d' ' -f1 /proc/uptime)"
for bdf in $STRATA_TESTBED_NVME0 $STRATA_TESTBED_NVME1 $STRATA_TESTBED_IVSHMEM ${STRATA_TESTBED_MODELS_NVME:-}; do
  [ -e "/sys/bus/pci/devices/$bdf" ] || continue
  group=$(readlink "/sys/bus/pci/devices/$bdf/iommu_group") || group=none
  drv=$(readlink "/sys/bus/pci/devices/$bdf/driver") || drv=none
  echo "TESTBED-DEVICE $bdf group=$(basename "$group") driver=$(basename "$drv")"
done

pass=0; fail=0
while read -r name dir args; do
  [ -n "$name" ] || continue
  echo "TESTBED-RUN $name"
  start=$(cut -d' ' -f1 /proc/uptime)
  # shellcheck disable=SC2086
  (cd "$dir" && exec "/tests/$name.test" -test.v -test.timeout=300s $args)
  rc=$?
  end=$(cut -d' ' -f1 /proc/uptime)
  if [ $rc = 0 ]; then r=PASS; pass=$((pass + 1)); else r=FAIL; fail=$((fail + 1)); fi
  echo "TESTBED-RESULT $name $r rc=$rc start=$start end=$end"
done < $list
if [ $fail != 0 ]; then
  echo "TESTBED-DMESG-BEGIN"; dmesg | tail -60; echo "TESTBED-DMESG-END"
fi
echo "TESTBED-DONE pass=$pass fail=$fail uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
