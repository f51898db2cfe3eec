#!/usr/bin/env bash
# apt-install.sh PACKAGE[=VERSION]...: installs Debian packages for the scripts (deny.sh, test.sh),
# one install at a time on the machine. Two runs of .ci/run at once on a fresh machine both reach
# `apt-get install` (chromium, postgresql, mariadb-server, python3-venv); without a shared lock the
# second fails with "Could not get lock /var/lib/dpkg/lock-frontend". Here every caller takes
# /var/lock/chokaq-apt.lock first, and apt itself waits for a dpkg lock held by anything else
# (DPkg::Lock::Timeout). Packages already installed (at the asked version) are skipped, so the
# second caller after the first's install does nothing. Exit status: apt-get's.
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: $0 PACKAGE[=VERSION]..." >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive

installed() {
    local name=${1%%=*} want="" have
    [ "$name" != "$1" ] && want=${1#*=}
    have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null) || return 1
    case "$have" in "install ok installed "*) ;; *) return 1 ;; esac
    [ -z "$want" ] || [ "${have##* }" = "$want" ]
}

exec 9>/var/lock/chokaq-apt.lock
flock -w 1800 9 || { echo "apt-install.sh: waited 30 minutes for /var/lock/chokaq-apt.lock" >&2; exit 1; }
todo=()
for pkg in "$@"; do installed "$pkg" || todo+=("$pkg"); done
[ "${#todo[@]}" -gt 0 ] || exit 0
apt-get -o DPkg::Lock::Timeout=900 update -qq || true
apt-get -o DPkg::Lock::Timeout=900 install -y -qq "${todo[@]}" >/dev/null
