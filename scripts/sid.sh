#!/usr/bin/env bash
# The newest CPython 3.13, 3.14 and 3.15, from Debian sid, in a chroot this script builds.
#
#   scripts/sid.sh build          make the chroot (about 2 minutes; nothing if it exists)
#   scripts/sid.sh need PKG...    install Debian packages inside it when missing
#   scripts/sid.sh CMD [ARG...]   run CMD inside it, in this directory, which is seen at
#                                 the same path inside (so venvs made there work there)
#
# Each run gets a private mount namespace (unshare): /proc, /dev, /sys and the work tree
# are bind-mounted into it and vanish with the run, so two runs never take each other's
# /proc away, and nothing is left mounted when a run ends or is killed.
# The chroot lives outside the work tree (CORUN_SID, default /var/tmp/corun-sid), so fresh
# clones on the same machine share it, and no tool walking the tree walks into it.
set -euo pipefail

SID=${CORUN_SID:-/var/tmp/corun-sid}
MIRROR=${CORUN_SID_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(
    python3.13 python3.13-dev python3.13-venv libpython3.13-testsuite
    python3.14 python3.14-dev python3.14-venv libpython3.14-testsuite
    python3.15 python3.15-dev python3.15-venv libpython3.15-testsuite
    gcc libc6-dev ca-certificates make nginx
)
# Bump when PACKAGES or the set-up below changes: an older chroot is rebuilt.
STAMP_TEXT="corun-sid 1: ${PACKAGES[*]}"

build() {
    if [ -f "$SID/.corun-stamp" ] && [ "$(cat "$SID/.corun-stamp")" = "$STAMP_TEXT" ]; then
        return 0
    fi
    command -v debootstrap >/dev/null || {
        echo "sid: installing debootstrap (apt-get)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    local tmp="$SID.tmp.$$"
    rm -rf "$tmp"
    echo "sid: debootstrap into $SID (about 2 minutes)" >&2
    local include
    include=$(IFS=,; echo "${PACKAGES[*]}")
    debootstrap --variant=minbase --include="$include" sid "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
        tail -n 20 "$tmp.log" >&2
        echo "sid: debootstrap failed (log: $tmp.log)" >&2
        exit 1
    }
    # This machine's mirror serves sid with an expired Release file.
    echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99corun-no-valid-until"
    # pip and apt inside reach the registries through the host's CA bundle.
    cp /etc/ssl/certs/ca-certificates.crt "$tmp/etc/ssl/certs/ca-certificates.crt"
    echo "$STAMP_TEXT" >"$tmp/.corun-stamp"
    rm -rf "$SID" "$tmp.log"
    mv "$tmp" "$SID"
}

run() {
    [ -f "$SID/.corun-stamp" ] || build
    local here
    here=$(pwd -P)
    unshare --mount --propagation private /bin/sh -euc '
        sid=$1; here=$2; shift 2
        for d in proc sys dev dev/shm dev/pts; do
            mkdir -p "$sid/$d"
            mount --rbind "/$d" "$sid/$d"
        done
        mkdir -p "$sid$here"
        mount --bind "$here" "$sid$here"
        # The host'"'"'s pip finds wheels in a folder that does not exist inside.
        exec chroot "$sid" /usr/bin/env -u PIP_FIND_LINKS -u PYTHONHOME \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$here" "$@"
    ' sid "$SID" "$here" "$@"
}

need() {
    local missing=() pkg
    for pkg in "$@"; do
        run dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "sid: installing ${missing[*]} inside the chroot (apt-get)" >&2
    run sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null' \
        sh "${missing[@]}"
}

case "${1:-}" in
    build) build ;;
    need) shift; build; need "$@" ;;
    "") echo "usage: scripts/sid.sh build | scripts/sid.sh CMD [ARG...]" >&2; exit 2 ;;
    *) run "$@" ;;
esac
