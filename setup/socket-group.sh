#!/bin/sh
# Creates the groups stratad's socket is checked against — `strata` (may
# open /run/strata/strata.sock: inference and status) and `strata-admin`
# (load, unload, bind devices) — adds users to them, and fixes the socket's
# directory, owner and mode (0660 root:strata) now and at boot (tmpfiles.d).
# Idempotent; --dry-run prints what it would do.
#
#   socket-group.sh [--dry-run] [--user NAME]... [--admin NAME]...
#
# Test hooks: STRATA_ETC (default /etc), STRATA_RUN (default /run),
# STRATA_GROUP_FILE (default $STRATA_ETC/group, read to see what exists).
set -eu
ETC=${STRATA_ETC:-/etc}
RUN=${STRATA_RUN:-/run}
GROUPS_FILE=${STRATA_GROUP_FILE:-$ETC/group}
DRY=0; USERS=; ADMINS=
say() { printf '%s\n' "$*"; }
die() { printf 'socket-group: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
run() { if [ "$DRY" = 1 ]; then say "would run: $*"; else "$@"; fi; }

while [ $# -gt 0 ]; do
  case $1 in
    --dry-run|-n) DRY=1 ;;
    --user) [ $# -ge 2 ] || usage; USERS="$USERS $2"; shift ;;
    --admin) [ $# -ge 2 ] || usage; ADMINS="$ADMINS $2"; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done

has_group() { grep -q "^$1:" "$GROUPS_FILE" 2>/dev/null; }
member() { grep "^$1:" "$GROUPS_FILE" 2>/dev/null | cut -d: -f4 | tr ',' '\n' | grep -qx "$2"; }

for g in strata strata-admin; do
  if has_group "$g"; then say "group $g exists"; else run groupadd --system "$g"; fi
done
for u in $USERS; do
  if member strata "$u"; then say "$u is in strata"; else run usermod -aG strata "$u"; fi
done
for u in $ADMINS; do
  for g in strata strata-admin; do
    if member "$g" "$u"; then say "$u is in $g"; else run usermod -aG "$g" "$u"; fi
  done
done

conf=$ETC/tmpfiles.d/strata.conf
want="# strata: the daemon's socket directory (setup/socket-group.sh)
d /run/strata 0755 root root -"
if [ -f "$conf" ] && [ "$(cat "$conf")" = "$want" ]; then
  say "$conf already set"
elif [ "$DRY" = 1 ]; then
  say "would write $conf"
else
  mkdir -p "$(dirname "$conf")"; printf '%s\n' "$want" > "$conf"; say "wrote $conf"
fi
run mkdir -p "$RUN/strata"
sock=$RUN/strata/strata.sock
if [ -S "$sock" ]; then
  run chgrp strata "$sock"
  run chmod 0660 "$sock"
else
  say "no socket at $sock yet: stratad.socket creates it 0660 root:strata (SocketGroup=strata)"
fi
[ -z "$USERS$ADMINS" ] || say "users added to a group must log in again for it to apply"
