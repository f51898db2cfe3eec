#!/usr/bin/env bash
# Checks the dependency graph with cargo-deny at a pinned version (deny.toml): licences, bans
# (rustls-webpki below 0.103.12 and rustls-pemfile are refused) and sources. These checks need
# no network beyond crates.io (the crates are fetched first). The advisory check needs the
# RustSec database (fetched from GitHub), so it is a release step instead (docs/security.md, "Before a release"):
#
#   scripts/deny.sh                 licences, bans, sources (what CI runs)
#   scripts/deny.sh advisories      the advisory check (needs network access to GitHub)
#
# cargo-deny is installed when missing, with `cargo install --locked`, into a cache directory
# keyed by its version (${XDG_CACHE_HOME:-$HOME/.cache}/chokaq-tools/cargo-deny-<version>), so a
# second run on the same machine does not build it again. Nothing is installed system-wide.
#
# The SQL Server backend's TLS goes through the platform's TLS library (tiberius' native-tls:
# OpenSSL on Linux), so building the workspace needs Debian's libssl-dev and pkg-config; where
# they are missing and apt-get is available they are installed first (CI runs as root).
set -euo pipefail

cd "$(dirname "$0")/.."
log() { printf '[deny.sh] %s\n' "$*" >&2; }

CARGO_DENY_VERSION=0.20.2

case "${1:-}" in
    -h|--help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac

# The build's Debian packages (the OpenSSL headers for native-tls).
missing=()
for pkg in libssl-dev pkg-config; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        log "installing ${missing[*]} (needed to build tiberius' native-tls)"
        scripts/apt-install.sh "${missing[@]}"
    else
        log "warning: ${missing[*]} not installed and cannot be installed here; the build needs them"
    fi
fi

TOOL_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/chokaq-tools/cargo-deny-$CARGO_DENY_VERSION"
DENY="$TOOL_ROOT/bin/cargo-deny"
if ! [ -x "$DENY" ] || ! "$DENY" --version 2>/dev/null | grep -qx "cargo-deny $CARGO_DENY_VERSION"; then
    mkdir -p "$(dirname "$TOOL_ROOT")"
    # Two runs at once build it once: the second waits here, then finds it installed.
    exec 8>"$TOOL_ROOT.lock"
    flock 8
fi
if ! [ -x "$DENY" ] || ! "$DENY" --version 2>/dev/null | grep -qx "cargo-deny $CARGO_DENY_VERSION"; then
    log "installing cargo-deny $CARGO_DENY_VERSION into $TOOL_ROOT (once per machine)"
    build_dir="$(mktemp -d)"
    trap 'rm -rf "$build_dir"' EXIT
    CARGO_TARGET_DIR="$build_dir" cargo install --locked --quiet cargo-deny --version "$CARGO_DENY_VERSION" \
        --root "$TOOL_ROOT"
    # `exec` below runs no EXIT trap: remove the build directory (over a gigabyte) now.
    rm -rf "$build_dir"
    trap - EXIT
fi

if [ "${1:-}" = advisories ]; then
    exec "$DENY" --workspace --all-features check advisories
fi
"$DENY" --version
# `--offline` keeps cargo-deny from fetching the advisory database, and also runs its
# `cargo metadata` offline, which needs every crate of the graph for every target in the local
# registry cache (windows-sys too, which a Linux build never downloads): fetch them first, from
# crates.io, at the versions of Cargo.lock. (A fresh machine failed here without it: "failed to
# download `windows-sys v0.61.2` ... --offline was specified".)
cargo fetch --locked --quiet
exec "$DENY" --workspace --all-features --offline check licenses bans sources
