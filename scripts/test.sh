#!/usr/bin/env bash
# Runs chokaq's whole test suite against real databases.
#
#   scripts/test.sh [extra cargo test args]
#
# With no arguments it builds every test binary once, then runs them CHOKAQ_TEST_JOBS at a time
# (default 2) with the doc tests, and the outage test (chokaq/tests/outage.rs, throwaway
# PostgreSQL clusters of its own) beside them all; with arguments it runs
# `cargo test --workspace --all-features ARGS` as it is.
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
CHROMIUM_VERSION=156.0.8078.129-1~deb12u1

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
    # The whole suite, built once, then run CHOKAQ_TEST_JOBS test binaries at a time (default
    # 2: most tests wait on the databases, so two binaries at once take about half the wall
    # time of one after the other on a 2-core machine; the tests isolate themselves, as two
    # CI runs at once must). Each binary runs in its package's directory, as `cargo test` runs
    # it, the longest first; its output is printed when it ends. The doc tests run as one more
    # job (`cargo test --doc`). The outage test (chokaq/tests/outage.rs) starts throwaway
    # PostgreSQL clusters of its own, on ports of their own, and spends most of its ~100 s
    # waiting for their restarts and stops: it runs beside all of these from the start. Any
    # failure fails the run, after every binary has run.
    log "cargo test --workspace --all-features --no-run (every test binary, built once)"
    run_dir=$(mktemp -d)
    cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics >"$run_dir/build.json"
    # One line per test binary: order key, package directory, binary, label.
    python3 - "$run_dir/build.json" >"$run_dir/bins" <<'PY'
import json, os, sys
# Binaries known to take longest (seconds on a quiet 2-core machine), so they start first.
LONG = {"chokaq-mssql/grammar": 150, "chokaq-postgres/concurrency": 100, "chokaq-mysql/grammar": 90,
        "chokaq-postgres/grammar": 80, "chokaq/lib": 75, "chokaq-postgres/conformance": 55,
        "chokaq-mysql/conformance": 50, "chokaq-bench/chokaq-bench": 45, "chokaq-cli/cli": 40,
        "chokaq/postgres": 40, "chokaq-conformance/runner": 35, "chokaq-mysql/teeth": 28,
        "chokaq-postgres/ops": 26, "chokaq-postgres/teeth": 25, "chokaq-sqlite/conformance": 25,
        "chokaq-web/filters_at_scale": 40}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test") or not m.get("executable"):
        continue
    pkg_dir = os.path.dirname(m["manifest_path"])
    t = m["target"]
    name = "lib" if t["kind"] == ["lib"] else t["name"]
    label = f"{os.path.basename(pkg_dir)}/{name}"
    if label == "chokaq/outage":
        print(f"outage\t{pkg_dir}\t{m['executable']}\t{label}")
        continue
    print(f"{1000 - LONG.get(label, 0):04d}\t{pkg_dir}\t{m['executable']}\t{label}")
PY
    outage=$(grep -P '^outage\t' "$run_dir/bins" || true)
    [ -n "$outage" ] || { log "error: no outage test binary in the build's output"; exit 1; }
    IFS=$'\t' read -r _ outage_dir outage_bin _ <<<"$outage"
    log "outage test in the background: $outage_bin"
    (cd "$outage_dir" && CARGO_MANIFEST_DIR="$outage_dir" "$outage_bin") >"$run_dir/outage.log" 2>&1 &
    outage_pid=$!
    jobs_n=${CHOKAQ_TEST_JOBS:-2}
    { grep -vP '^outage\t' "$run_dir/bins" | sort; printf '0000\t%s\tdoc\tdoc tests\n' "$PWD"; } \
        | sort | cut -f2- >"$run_dir/queue"
    log "$(wc -l <"$run_dir/queue") test jobs (binaries and the doc tests), $jobs_n at a time, --skip outage_"
    export run_dir
    run_one() {
        local dir=$1 bin=$2 label=$3 n rc=0 t0=$SECONDS
        n=$(printf '%s' "$label" | tr -c 'A-Za-z0-9_-' '_')
        if [ "$bin" = doc ]; then
            cargo test --workspace --all-features --doc >"$run_dir/$n.log" 2>&1 || rc=$?
        else
            (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$bin" --skip outage_) >"$run_dir/$n.log" 2>&1 || rc=$?
        fi
        echo "$rc" >"$run_dir/$n.rc"
        {
            flock 9
            printf '\n[test.sh] ==== %s (exit %s, %s s)\n' "$label" "$rc" "$((SECONDS - t0))"
            cat "$run_dir/$n.log"
        } 9>"$run_dir/print.lock"
    }
    export -f run_one
    tr '\t' '\n' <"$run_dir/queue" | xargs -d '\n' -n 3 -P "$jobs_n" bash -c 'run_one "$@"' _ || true
    rc=0
    failed=$(grep -Lx 0 "$run_dir"/*.rc || true)
    if [ -n "$failed" ]; then
        log "FAILED: $(for f in $failed; do basename "$f" .rc; done | tr '\n' ' ')"
        rc=1
    fi
    [ "$(ls "$run_dir"/*.rc | wc -l)" = "$(wc -l <"$run_dir/queue")" ] || { log "error: not every test job ran"; rc=1; }
    outage_rc=0
    wait "$outage_pid" || outage_rc=$?
    log "the outage test (exit $outage_rc):"
    cat "$run_dir/outage.log"
    # The totals of every binary's `test result:` lines.
    cat "$run_dir"/*.log | awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
        END { printf "[test.sh] in all: %d passed, %d failed, %d ignored\n", p, f, g }' >&2
    # The failures again, last, where a log's tail shows them: each failed job's failing tests
    # and their panic messages.
    for f in $failed; do
        log "FAILED $(basename "$f" .rc):"
        grep -E -A 4 '^---- .* stdout ----$|panicked at' "${f%.rc}.log" | head -n 60 >&2 || true
        sed -n '/^failures:$/,/^test result:/p' "${f%.rc}.log" | grep -E '^    ' | head -n 20 >&2 || true
    done
    [ "$outage_rc" = 0 ] || log "FAILED the outage test (exit $outage_rc): its log is above"
    rm -rf "$run_dir"
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
