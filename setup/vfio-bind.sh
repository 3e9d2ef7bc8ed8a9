#!/bin/sh
# Hands NVMe controllers to vfio-pci for strata's userspace driver, and back
# to the kernel's nvme driver, now and (with --persist, the default for bind)
# at every boot: a udev rule sets driver_override when the device appears, and
# a systemd unit re-runs `vfio-bind.sh apply` early at boot for devices the
# nvme driver claimed first. Refuses a controller whose namespaces hold the
# root or boot file system, are mounted, used as swap or held by LVM/md/dm.
# Idempotent: a second run changes nothing. --dry-run prints what it would do.
#
#   vfio-bind.sh [--dry-run] [--no-persist] bind BDF...
#   vfio-bind.sh [--dry-run] unbind BDF...    back to nvme, persistence removed
#   vfio-bind.sh [--dry-run] apply            bind every BDF in $ETC/strata/vfio-devices
#   vfio-bind.sh status [BDF...]
#
# Test hooks: STRATA_SYSFS, STRATA_PROC, STRATA_ETC (roots, default /sys,
# /proc, /etc), STRATA_MODPROBE (default modprobe), STRATA_SYSTEMCTL (default
# systemctl; "true" skips), STRATA_LIBDIR (where the script installs itself for
# the unit, default /usr/local/lib/strata).
set -eu

SYS=${STRATA_SYSFS:-/sys}
PROC=${STRATA_PROC:-/proc}
ETC=${STRATA_ETC:-/etc}
MODPROBE=${STRATA_MODPROBE:-modprobe}
SYSTEMCTL=${STRATA_SYSTEMCTL:-systemctl}
LIBDIR=${STRATA_LIBDIR:-/usr/local/lib/strata}
LIST=$ETC/strata/vfio-devices
RULES=$ETC/udev/rules.d/70-strata-vfio.rules
UNIT=$ETC/systemd/system/strata-vfio.service
MODLOAD=$ETC/modules-load.d/strata-vfio.conf

DRY=0
PERSIST=1
say() { printf '%s\n' "$*"; }
die() { printf 'vfio-bind: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# run CMD...: run it, or print it under --dry-run.
run() {
  if [ "$DRY" = 1 ]; then say "would run: $*"; else "$@"; fi
}
# put VALUE FILE: write a sysfs attribute.
put() {
  if [ "$DRY" = 1 ]; then say "would write '$1' to $2"; return 0; fi
  printf '%s' "$1" > "$2" || die "writing '$1' to $2 failed"
}
# install_file FILE CONTENT: write FILE when its content differs.
install_file() {
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then return 0; fi
  if [ "$DRY" = 1 ]; then say "would write $1:"; printf '%s\n' "$2" | sed 's/^/    /'; return 0; fi
  mkdir -p "$(dirname "$1")"
  printf '%s\n' "$2" > "$1.tmp" && mv "$1.tmp" "$1"
  say "wrote $1"
}

canon() {
  b=$(printf '%s' "$1" | tr 'A-F' 'a-f')
  case $b in
    [0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7]) ;;
    [0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7]) b=0000:$b ;;
    *) die "not a PCI address: $1 (want dddd:bb:dd.f)" ;;
  esac
  printf '%s' "$b"
}

driver_of() {
  l=$(readlink "$SYS/bus/pci/devices/$1/driver" 2>/dev/null) || { printf ''; return 0; }
  basename "$l"
}

# users BDF: print why the host still uses the controller, one per line.
users() {
  mi=$PROC/self/mountinfo
  for ns in "$SYS/bus/pci/devices/$1"/nvme/nvme*/nvme*n*; do
    [ -e "$ns/dev" ] || continue
    for part in "$ns" "$ns"/nvme*n*p*; do
      [ -e "$part/dev" ] || continue
      name=$(basename "$part")
      dev=$(cat "$part/dev")
      if [ -f "$mi" ]; then
        awk -v d="$dev" -v n="$name" '$3 == d {
            what = "mounted on " $5
            if ($5 == "/" || $5 == "/boot" || $5 == "/boot/efi" || $5 == "/usr") what = "boot disk: holds " $5
            print "/dev/" n " " what
          }' "$mi"
      fi
      if [ -f "$PROC/swaps" ] && awk -v n="/dev/$name" 'NR > 1 && $1 == n { f = 1 } END { exit !f }' "$PROC/swaps"; then
        say "/dev/$name is a swap area"
      fi
      for h in "$part"/holders/*; do
        [ -e "$h" ] && say "/dev/$name is held by $(basename "$h") (LVM, md or dm-crypt)"
      done
    done
  done
}

check_nvme() {
  d=$SYS/bus/pci/devices/$1
  [ -d "$d" ] || die "no PCI device $1"
  class=$(cat "$d/class")
  [ "$class" = 0x010802 ] || die "$1 is not an NVMe controller (class $class)"
}

persist_add() {
  list=$(cat "$LIST" 2>/dev/null || true)
  case " $(printf '%s' "$list" | tr '\n' ' ') " in *" $1 "*) ;; *) list=$(printf '%s\n%s' "$list" "$1" | sed '/^$/d' | sort -u) ;; esac
  write_persistence "$list"
}
persist_remove() {
  [ -f "$LIST" ] || return 0
  list=$(grep -vx "$1" "$LIST" || true)
  write_persistence "$list"
}
write_persistence() {
  install_file "$LIST" "$1"
  rules="# strata: hand these NVMe controllers to vfio-pci (setup/vfio-bind.sh)"
  for b in $1; do
    rules=$(printf '%s\nACTION=="add", SUBSYSTEM=="pci", KERNEL=="%s", ATTR{driver_override}="vfio-pci"' "$rules" "$b")
  done
  install_file "$RULES" "$rules"
  install_file "$MODLOAD" "vfio-pci"
  if [ "$DRY" = 0 ] && [ "$(cat "$0")" != "$(cat "$LIBDIR/vfio-bind.sh" 2>/dev/null)" ]; then
    mkdir -p "$LIBDIR" && cp "$0" "$LIBDIR/vfio-bind.sh" && chmod 0755 "$LIBDIR/vfio-bind.sh"
  fi
  install_file "$UNIT" "[Unit]
Description=strata: bind NVMe controllers listed in $LIST to vfio-pci
DefaultDependencies=no
After=systemd-modules-load.service systemd-udevd.service
Before=stratad.service local-fs-pre.target
ConditionPathExists=$LIST

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$LIBDIR/vfio-bind.sh --no-persist apply

[Install]
WantedBy=sysinit.target"
  if [ "$SYSTEMCTL" != true ] && command -v "$SYSTEMCTL" >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    run "$SYSTEMCTL" daemon-reload
    if [ -n "$1" ]; then run "$SYSTEMCTL" enable strata-vfio.service; else run "$SYSTEMCTL" disable strata-vfio.service; fi
  fi
}

bind_one() {
  b=$(canon "$1")
  check_nvme "$b"
  drv=$(driver_of "$b")
  if [ "$drv" = vfio-pci ]; then
    say "$b: already bound to vfio-pci"
  else
    why=$(users "$b")
    [ -z "$why" ] || die "refusing to take $b from the host:
$why"
    [ -e "$SYS/bus/pci/devices/$b/iommu_group" ] || die "$b has no IOMMU group: turn the IOMMU on first (strata setup check says how)"
    [ -d "$SYS/bus/pci/drivers/vfio-pci" ] || run "$MODPROBE" vfio-pci
    put vfio-pci "$SYS/bus/pci/devices/$b/driver_override"
    [ -z "$drv" ] || put "$b" "$SYS/bus/pci/devices/$b/driver/unbind"
    put "$b" "$SYS/bus/pci/drivers_probe"
    if [ "$DRY" = 0 ]; then
      now=$(driver_of "$b")
      [ "$now" = vfio-pci ] || die "$b is bound to '${now:-nothing}' after probing, not vfio-pci (is vfio-pci loaded?)"
      say "$b: bound to vfio-pci (was ${drv:-unbound})"
    fi
  fi
  [ "$PERSIST" = 0 ] || persist_add "$b"
}

unbind_one() {
  b=$(canon "$1")
  check_nvme "$b"
  drv=$(driver_of "$b")
  if [ "$drv" = vfio-pci ] || [ "$(cat "$SYS/bus/pci/devices/$b/driver_override" 2>/dev/null)" = vfio-pci ]; then
    if [ "$DRY" = 1 ]; then say "would clear $SYS/bus/pci/devices/$b/driver_override"
    else printf '\n' > "$SYS/bus/pci/devices/$b/driver_override" || die "clearing driver_override of $b failed"; fi
    [ "$drv" != vfio-pci ] || put "$b" "$SYS/bus/pci/devices/$b/driver/unbind"
    [ -d "$SYS/bus/pci/drivers/nvme" ] || run "$MODPROBE" nvme
    put "$b" "$SYS/bus/pci/drivers_probe"
    if [ "$DRY" = 0 ]; then
      now=$(driver_of "$b")
      [ "$now" = nvme ] || die "$b is bound to '${now:-nothing}' after probing, not nvme"
      say "$b: back on nvme"
    fi
  else
    say "$b: not on vfio-pci (driver ${drv:-none})"
  fi
  persist_remove "$b"
}

while [ $# -gt 0 ]; do
  case $1 in
    --dry-run|-n) DRY=1 ;;
    --no-persist) PERSIST=0 ;;
    --persist) PERSIST=1 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
  bind) [ $# -ge 1 ] || usage; for b in "$@"; do bind_one "$b"; done ;;
  unbind) [ $# -ge 1 ] || usage; for b in "$@"; do unbind_one "$b"; done ;;
  apply)
    [ -f "$LIST" ] || { say "no $LIST: nothing to bind"; exit 0; }
    PERSIST=0
    for b in $(cat "$LIST"); do bind_one "$b"; done ;;
  status)
    if [ $# = 0 ]; then
      set --
      for d in "$SYS"/bus/pci/devices/*; do
        [ "$(cat "$d/class" 2>/dev/null)" = 0x010802 ] && set -- "$@" "$(basename "$d")"
      done
    fi
    for b in "$@"; do
      b=$(canon "$b")
      g=$(readlink "$SYS/bus/pci/devices/$b/iommu_group" 2>/dev/null || true)
      p=no; grep -qx "$b" "$LIST" 2>/dev/null && p=yes
      say "$b driver=$(driver_of "$b") iommu_group=${g##*/} persistent=$p"
      users "$b" | sed 's/^/    in use: /'
    done ;;
  *) usage ;;
esac
