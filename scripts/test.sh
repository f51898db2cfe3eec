#!/usr/bin/env bash
# Runs chokaq's whole test suite against real databases.
#
#   scripts/test.sh [extra cargo test args]
#
# With no arguments it builds every test binary once, then runs the outage test
# (chokaq/tests/outage.rs, throwaway PostgreSQL clusters of its own) beside all the others; with
# arguments it runs `cargo test --workspace --all-features ARGS` as it is.
#
# PostgreSQL is found, in this order:
#   1. $CHOKAQ_TEST_POSTGRES_URL;
#   2. a server on 127.0.0.1:5432 (user postgres, trust auth; database `test`, else `postgres`);
#   3. a throwaway cluster started from the local PostgreSQL binaries in a temporary
#      directory (Debian's `postgresql` package is installed first if no binaries exist),
#      stopped and deleted when the tests end.
# MariaDB (the MySQL backend) is found, in this order:
#   1. $CHOKAQ_TEST_MYSQL_URL;
#   2. a server on 127.0.0.1:3306 (user root, no password, database `test`, created if missing);
#   3. a throwaway MariaDB server started from the local binaries (mariadbd, mariadb-install-db) in
#      a temporary directory (Debian's `mariadb-server` package is installed first if no binaries
#      exist), stopped and deleted when the tests end. CHOKAQ_TEST_MYSQL_THROWAWAY=1 forces this.
# SQL Server tests run when $CHOKAQ_TEST_MSSQL_URL is set, and show as ignored otherwise.
# Without a URL, where a Docker engine answers (`docker info`), CHOKAQ_TEST_MSSQL_DOCKER=1 is set:
# each of the three SQL Server conformance binaries (RCSI off, RCSI on, both row-versioning
# options off) then starts SQL Server 2022 through testcontainers, runs against it and removes
# it. Set CHOKAQ_TEST_MSSQL_DOCKER=0 to keep them ignored instead.
# The SQL grammar checks need sqlfluff 4.5.0 (PyPI) or newer: when the one on the PATH is
# missing or older, that exact version is installed into a virtualenv under target/tools/ and
# put first on the PATH of the tests (nothing is installed system-wide).
# After the cargo tests, the dashboard's browser end-to-end test (chokaq-web/e2e): `npm ci`
# installs playwright-core at the exact version of chokaq-web/e2e/package-lock.json, and Debian's
# chromium is installed when `chromium` is not on the PATH (see CHROMIUM_VERSION below). It needs
# Node.js 20 or newer and npm; without them (or without chromium) it is skipped with the reason.
# CHOKAQ_TEST_BROWSER=0 skips it.
# Set CHOKAQ_TEST_REQUIRE=postgres,sqlite,mysql,sqlfluff,browser to turn a missing database or tool into
# a failure instead of ignored tests (CI does).
set -euo pipefail

cd "$(dirname "$0")/.."
log() { printf '[test.sh] %s\n' "$*" >&2; }

# The Debian chromium the browser test was written against. Pinned so that a fresh machine gets
# the browser the test passed with; but Debian replaces chromium in the archive at every security
# update (the old version is then gone from the mirror), so when this exact version can no longer
# be installed the current Debian chromium is installed instead, with a warning: Playwright drives
# it over the DevTools protocol, which stays compatible across versions. Bump this when that
# warning shows.
CHROMIUM_VERSION=156.0.8078.114-1~deb12u1

# The sqlfluff version the grammar checks are known to pass with (3.x cannot parse valid T-SQL
# such as `UPDATE TOP (@n)` and `DROP SEQUENCE IF EXISTS`).
SQLFLUFF_VERSION=4.5.0

case "${1:-}" in
    -h|--help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac

PG_TMP=""
MY_TMP=""
MY_PID=""
cleanup() {
    if [ -n "$PG_TMP" ] && [ -d "$PG_TMP" ]; then
        log "stopping the throwaway PostgreSQL cluster"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$PG_TMP"
    fi
    if [ -n "$MY_PID" ]; then
        log "stopping the throwaway MariaDB server"
        kill "$MY_PID" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$MY_PID" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$MY_PID" 2>/dev/null || true
    fi
    if [ -n "$MY_TMP" ] && [ -d "$MY_TMP" ]; then
        rm -rf "$MY_TMP"
    fi
}
trap cleanup EXIT

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_bin_dir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"; return 0
    fi
    return 1
}

try_url() {
    # Succeeds if a PostgreSQL server answers a query at the URL.
    local url=$1
    if command -v psql >/dev/null 2>&1; then
        PGCONNECT_TIMEOUT=3 psql "$url" -Atqc 'select 1' >/dev/null 2>&1
    else
        # No client: fall back to a TCP check of the default port.
        (exec 3<>/dev/tcp/127.0.0.1/5432) >/dev/null 2>&1
    fi
}

start_throwaway_cluster() {
    if ! PG_BIN=$(pg_bin_dir); then
        log "no PostgreSQL binaries found: installing Debian's postgresql package"
        scripts/apt-install.sh postgresql
        PG_BIN=$(pg_bin_dir)
    fi
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
        useradd --system --home /var/lib/postgresql --shell /bin/bash postgres
    fi
    PG_TMP=$(mktemp -d /tmp/chokaq-pg.XXXXXX)
    chmod 755 "$PG_TMP"
    [ "$(id -u)" = 0 ] && chown postgres "$PG_TMP"
    local port=55432
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") >/dev/null 2>&1; do port=$((port + 1)); done
    log "starting a throwaway PostgreSQL cluster ($PG_BIN) on 127.0.0.1:$port"
    as_pg "$PG_BIN/initdb" -D "$PG_TMP/data" -U postgres -A trust -E UTF8 >/dev/null
    as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 60 \
        -o "-p $port -k $PG_TMP -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off" start >/dev/null
    CHOKAQ_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

if [ "${CHOKAQ_TEST_PG_THROWAWAY:-}" = 1 ]; then
    # Exercises step 3 even where a server is running.
    start_throwaway_cluster
elif [ -n "${CHOKAQ_TEST_POSTGRES_URL:-}" ]; then
    log "PostgreSQL from CHOKAQ_TEST_POSTGRES_URL"
elif try_url "postgres://postgres@127.0.0.1:5432/test"; then
    CHOKAQ_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
    log "PostgreSQL on 127.0.0.1:5432 (database test)"
elif try_url "postgres://postgres@127.0.0.1:5432/postgres"; then
    CHOKAQ_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/postgres"
    log "PostgreSQL on 127.0.0.1:5432 (database postgres)"
else
    start_throwaway_cluster
fi
export CHOKAQ_TEST_POSTGRES_URL

# ---- MariaDB ----------------------------------------------------------------------------------
mysql_client() {
    if command -v mariadb >/dev/null 2>&1; then echo mariadb; elif command -v mysql >/dev/null 2>&1; then echo mysql;
    else return 1; fi
}

try_mysql() {
    # try_mysql PORT: succeeds if a MariaDB/MySQL server on 127.0.0.1:PORT takes root without a
    # password (and then makes sure the database `test` exists).
    local port=$1 client
    if client=$(mysql_client); then
        "$client" --protocol=TCP -h 127.0.0.1 -P "$port" -u root --connect-timeout=3 \
            -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null 2>&1
    else
        # No client: fall back to a TCP check of the port.
        (exec 3<>"/dev/tcp/127.0.0.1/$port") >/dev/null 2>&1
    fi
}

mysqld_bin() {
    local b
    for b in mariadbd mysqld; do
        if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
        if [ -x "/usr/sbin/$b" ]; then echo "/usr/sbin/$b"; return 0; fi
    done
    return 1
}

start_throwaway_mariadb() {
    local bin install port
    if ! bin=$(mysqld_bin) || ! command -v mariadb-install-db >/dev/null 2>&1; then
        log "no MariaDB binaries found: installing Debian's mariadb-server package"
        scripts/apt-install.sh mariadb-server
        # The package starts its own service on 3306; this run uses its own server below.
        bin=$(mysqld_bin)
    fi
    install=$(command -v mariadb-install-db)
    MY_TMP=$(mktemp -d /tmp/chokaq-my.XXXXXX)
    chmod 755 "$MY_TMP"
    port=33306
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") >/dev/null 2>&1; do port=$((port + 1)); done
    log "starting a throwaway MariaDB server ($bin) on 127.0.0.1:$port"
    "$install" --no-defaults --user="$(id -un)" --datadir="$MY_TMP/data" \
        --auth-root-authentication-method=normal --skip-test-db >"$MY_TMP/install.log" 2>&1 \
        || { log "mariadb-install-db failed: $(tail -n 5 "$MY_TMP/install.log")"; return 1; }
    "$bin" --no-defaults --user="$(id -un)" --datadir="$MY_TMP/data" --socket="$MY_TMP/mysqld.sock" \
        --pid-file="$MY_TMP/mysqld.pid" --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
        --max-connections=500 --innodb-flush-log-at-trx-commit=2 --log-error="$MY_TMP/server.log" &
    MY_PID=$!
    for _ in $(seq 1 120); do
        if try_mysql "$port"; then
            CHOKAQ_TEST_MYSQL_URL="mysql://root@127.0.0.1:$port/test"
            return 0
        fi
        kill -0 "$MY_PID" 2>/dev/null || break
        sleep 0.5
    done
    log "the throwaway MariaDB server did not start: $(tail -n 5 "$MY_TMP/server.log" 2>/dev/null)"
    return 1
}

if [ "${CHOKAQ_TEST_MYSQL_THROWAWAY:-}" = 1 ]; then
    start_throwaway_mariadb || true
elif [ -n "${CHOKAQ_TEST_MYSQL_URL:-}" ]; then
    log "MariaDB/MySQL from CHOKAQ_TEST_MYSQL_URL"
elif try_mysql 3306; then
    CHOKAQ_TEST_MYSQL_URL="mysql://root@127.0.0.1:3306/test"
    log "MariaDB/MySQL on 127.0.0.1:3306 (database test)"
else
    start_throwaway_mariadb || true
fi
if [ -n "${CHOKAQ_TEST_MYSQL_URL:-}" ]; then
    export CHOKAQ_TEST_MYSQL_URL
else
    log "no MariaDB server: the MySQL backend's tests will say so (CHOKAQ_TEST_REQUIRE=mysql makes that a failure)"
    # A URL nothing answers at, so the tests report the server missing instead of guessing.
    export CHOKAQ_TEST_MYSQL_URL="mysql://root@127.0.0.1:1/test"
fi

version_at_least() {
    # version_at_least HAVE WANT: HAVE >= WANT in version order.
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

ensure_sqlfluff() {
    local have venv
    have=$(sqlfluff --version 2>/dev/null | awk '{print $NF}') || have=""
    if [ -n "$have" ] && version_at_least "$have" "$SQLFLUFF_VERSION"; then
        log "sqlfluff $have on the PATH"
        return 0
    fi
    venv="$PWD/target/tools/sqlfluff-$SQLFLUFF_VERSION"
    if [ ! -x "$venv/bin/sqlfluff" ]; then
        log "installing sqlfluff==$SQLFLUFF_VERSION into $venv (found: ${have:-none})"
        rm -rf "$venv"
        if ! python3 -m venv "$venv" >&2; then
            log "python3 -m venv failed: installing Debian's python3-venv"
            scripts/apt-install.sh python3-venv
            rm -rf "$venv"
            python3 -m venv "$venv" >&2
        fi
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "sqlfluff==$SQLFLUFF_VERSION" >&2 \
            || { log "could not install sqlfluff: the grammar tests will say so"; return 0; }
    fi
    export PATH="$venv/bin:$PATH"
    log "sqlfluff $(sqlfluff --version | awk '{print $NF}') from $venv"
}
ensure_sqlfluff

# SQL Server: a URL wins; else SQL Server 2022 in Docker, through testcontainers, where Docker
# answers (the test binaries start and stop it; see docs/sqlserver.md).
if [ -z "${CHOKAQ_TEST_MSSQL_URL:-}" ] && [ -z "${CHOKAQ_TEST_MSSQL_DOCKER:-}" ]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        export CHOKAQ_TEST_MSSQL_DOCKER=1
        log "Docker answers: the SQL Server conformance binaries start SQL Server 2022 through testcontainers"
    fi
fi

if [ -z "${CHOKAQ_TEST_MSSQL_URL:-}" ] && [ "${CHOKAQ_TEST_MSSQL_DOCKER:-}" != 1 ]; then
    log "CHOKAQ_TEST_MSSQL_URL is not set: SQL Server conformance cases will show as ignored"
fi

if [ "$#" -gt 0 ]; then
    log "cargo test --workspace --all-features $*"
    cargo test --workspace --all-features "$@"
else
    # The whole suite. The outage test (chokaq/tests/outage.rs) starts throwaway PostgreSQL
    # clusters of its own, on ports of their own, and spends most of its ~100 s waiting for
    # their restarts and stops: it runs beside the other binaries (which share the servers
    # above) instead of after them. Its output is printed when it ends; either failing fails.
    log "cargo test --workspace --all-features --no-run (every test binary, built once)"
    # (The build's output goes to stderr through the inherited descriptor: `tee /dev/stderr`
    # would reopen, and so truncate, a log file that stderr is redirected to.)
    build_log=$(mktemp)
    cargo test --workspace --all-features --no-run 2>&1 | tee "$build_log" >&2
    outage_bin=$(sed -n 's|^ *Executable tests/outage.rs (\(.*\))$|\1|p' "$build_log" | head -n 1)
    rm -f "$build_log"
    [ -n "$outage_bin" ] || { log "error: no outage test binary in the build's output"; exit 1; }
    case "$outage_bin" in /*) ;; *) outage_bin="$PWD/$outage_bin" ;; esac
    outage_log=$(mktemp)
    log "outage test in the background: $outage_bin"
    (cd chokaq && "$outage_bin") >"$outage_log" 2>&1 &
    outage_pid=$!
    log "cargo test --workspace --all-features -- --skip outage_"
    rc=0
    cargo test --workspace --all-features -- --skip outage_ || rc=$?
    outage_rc=0
    wait "$outage_pid" || outage_rc=$?
    log "the outage test (exit $outage_rc):"
    cat "$outage_log"
    rm -f "$outage_log"
    [ "$rc" = 0 ] || exit "$rc"
    [ "$outage_rc" = 0 ] || exit "$outage_rc"
fi

# ---- The dashboard's browser end-to-end test --------------------------------------------------
browser_required() {
    case ",${CHOKAQ_TEST_REQUIRE:-}," in *,browser,*) return 0 ;; esac
    return 1
}

ensure_chromium() {
    command -v chromium >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || { log "chromium is missing and this is not root: cannot apt-get install it"; return 1; }
    log "installing Debian's chromium=$CHROMIUM_VERSION"
    if ! scripts/apt-install.sh "chromium=$CHROMIUM_VERSION"; then
        command -v chromium >/dev/null 2>&1 && return 0
        log "WARNING: chromium $CHROMIUM_VERSION is no longer in the archive: installing the current Debian chromium (bump CHROMIUM_VERSION in scripts/test.sh)"
        scripts/apt-install.sh chromium || return 1
    fi
}

node_ok() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
    local major
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || return 1
    [ "${major:-0}" -ge 20 ]
}

browser_test() {
    local why=""
    if [ "${CHOKAQ_TEST_BROWSER:-}" = 0 ]; then
        log "browser test skipped: CHOKAQ_TEST_BROWSER=0"
        return 0
    fi
    if ! node_ok; then
        why="Node.js 20 or newer with npm is not on the PATH"
    elif ! ensure_chromium; then
        why="Debian's chromium could not be installed"
    fi
    if [ -n "$why" ]; then
        if browser_required; then
            log "browser test: $why, and CHOKAQ_TEST_REQUIRE names browser"
            return 1
        fi
        log "SKIPPED the browser test: $why (set CHOKAQ_TEST_REQUIRE=browser to fail instead)"
        return 0
    fi
    log "browser test: npm ci (playwright-core), chromium $(chromium --version 2>/dev/null | awk '{print $2}')"
    (cd chokaq-web/e2e && npm ci --no-audit --no-fund --loglevel=error)
    cargo build -q -p chokaq-web --example e2e_server
    (cd chokaq-web/e2e && node --test dashboard.test.mjs)
    log "browser test screenshots: target/screenshots/overview.png, target/screenshots/job.png"
}
browser_test
