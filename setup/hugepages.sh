#!/bin/sh
# Reserves hugepages for strata's DMA buffers (fewer IOMMU mappings and TLB
# misses than 4 KiB pages), now and at every boot. 2 MiB pages are reserved
# at run time and kept by a sysctl.d file; 1 GiB pages can only be reserved
# reliably at boot, so for them the script prints the kernel command line to
# add. Idempotent; --dry-run prints what it would do.
#
#   hugepages.sh [--dry-run] [--size 2M|1G] --pages N
#   hugepages.sh status
#
# Test hooks: STRATA_SYSFS, STRATA_PROC, STRATA_ETC (default /sys, /proc, /etc).
set -eu
SYS=${STRATA_SYSFS:-/sys}
PROC=${STRATA_PROC:-/proc}
ETC=${STRATA_ETC:-/etc}
CONF=$ETC/sysctl.d/80-strata-hugepages.conf
DRY=0; SIZE=2M; PAGES=
say() { printf '%s\n' "$*"; }
die() { printf 'hugepages: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --dry-run|-n) DRY=1 ;;
    --size) [ $# -ge 2 ] || usage; SIZE=$2; shift ;;
    --pages) [ $# -ge 2 ] || usage; PAGES=$2; shift ;;
    status)
      for d in "$SYS"/kernel/mm/hugepages/hugepages-*; do
        [ -d "$d" ] || continue
        say "$(basename "$d"): $(cat "$d/nr_hugepages") reserved, $(cat "$d/free_hugepages") free"
      done
      [ -f "$CONF" ] && say "persistent: $(cat "$CONF" | grep -v '^#')"
      exit 0 ;;
    -h|--help) usage ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done
case $PAGES in ''|*[!0-9]*) usage ;; esac
case $SIZE in
  2M|2m) kb=2048 ;;
  1G|1g) kb=1048576 ;;
  *) die "--size must be 2M or 1G" ;;
esac
node=$SYS/kernel/mm/hugepages/hugepages-${kb}kB
[ -d "$node" ] || die "this kernel has no ${SIZE} hugepages ($node missing)"

if [ "$kb" = 1048576 ]; then
  say "1 GiB pages are reserved at boot: add 'default_hugepagesz=1G hugepagesz=1G hugepages=$PAGES' to GRUB_CMDLINE_LINUX in $ETC/default/grub, run update-grub and reboot"
  exit 0
fi

cur=$(cat "$node/nr_hugepages")
if [ "$cur" -ge "$PAGES" ]; then
  say "$cur pages of 2 MiB already reserved (asked for $PAGES)"
elif [ "$DRY" = 1 ]; then
  say "would write $PAGES to $node/nr_hugepages (now $cur)"
else
  printf '%s' "$PAGES" > "$node/nr_hugepages" || die "writing $node/nr_hugepages failed (are you root?)"
  got=$(cat "$node/nr_hugepages")
  if [ "$got" -lt "$PAGES" ]; then
    say "only $got of $PAGES pages could be reserved now (memory is fragmented); the boot-time setting below gets them all after a reboot"
  else
    say "reserved $got pages of 2 MiB"
  fi
fi

want="# strata: hugepages for DMA buffers (setup/hugepages.sh)
vm.nr_hugepages = $PAGES"
if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$want" ]; then
  say "$CONF already set"
elif [ "$DRY" = 1 ]; then
  say "would write $CONF: vm.nr_hugepages = $PAGES"
else
  mkdir -p "$(dirname "$CONF")"
  printf '%s\n' "$want" > "$CONF"
  say "wrote $CONF"
fi
