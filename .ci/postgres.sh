#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests/test_gradebook_postgres.py. Prints its URL (and nothing else) on
# stdout; logs go to stderr. Idempotent: a second call finds the running server and prints the same URL.
#
#   export GENLAB_TEST_PG_URL="$(.ci/postgres.sh)"
#   GENLAB_REQUIRE_PG=1 make test          # the postgres tests then fail instead of skipping
#   .ci/postgres.sh stop                   # stops the server (the data directory is kept)
#
# The cluster lives in its own data directory (GENLAB_PG_DIR, default /tmp/genlab-pg) on its own port
# (GENLAB_PG_PORT, default 55432), so it neither needs systemd nor touches a system cluster. Run as root it
# installs postgresql with apt-get if missing and runs the server as the `postgres` user (initdb refuses root).
set -euo pipefail

DIR="${GENLAB_PG_DIR:-/tmp/genlab-pg}"
PORT="${GENLAB_PG_PORT:-55432}"
URL="postgresql://genlab:genlab@127.0.0.1:${PORT}/genlab"
log() { echo "postgres.sh: $*" >&2; }

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(bindir)" ] && ! command -v initdb >/dev/null; then
    log "installing postgresql (apt-get)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >&2
fi
BIN="$(bindir)"; BIN="${BIN:-$(dirname "$(command -v initdb)")}"

# Who owns the cluster: `postgres` when we are root, else ourselves.
if [ "$(id -u)" -eq 0 ]; then
    OWNER=postgres
    as_owner() { runuser -u postgres -- "$@"; }
else
    OWNER="$(id -un)"
    as_owner() { "$@"; }
fi

mkdir -p "$DIR"
[ "$(id -u)" -ne 0 ] || chown "$OWNER" "$DIR"
if [ "${1:-}" = "stop" ]; then
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >&2 || true
    exit 0
fi
if [ ! -f "$DIR/data/PG_VERSION" ]; then
    log "initdb in $DIR/data"
    # Local (socket) connections trust the cluster's owner; TCP needs the password.
    as_owner "$BIN/initdb" -D "$DIR/data" -U "$OWNER" --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --locale=C.UTF-8 >&2 2>/dev/null \
      || as_owner "$BIN/initdb" -D "$DIR/data" -U "$OWNER" --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --no-locale >&2
fi
if ! as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
    log "starting on 127.0.0.1:$PORT"
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2
fi

psql_() { as_owner "$BIN/psql" -h "$DIR" -p "$PORT" -U "$OWNER" -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
# CREATEDB: the tests make a fresh database per test and drop it afterwards.
if [ "$(psql_ -c "SELECT 1 FROM pg_roles WHERE rolname = 'genlab'")" != 1 ]; then
    psql_ -c "CREATE ROLE genlab LOGIN CREATEDB PASSWORD 'genlab'" >&2
fi
# DROP DATABASE ... WITH (FORCE) ends the connections left on a test's database, and a role may end only its own
# role's: CI once failed a teardown with "must be a member of the role whose process is being terminated or member of
# pg_signal_backend" (the server's other processes, autovacuum's workers among them, are its owner's).
psql_ -c "GRANT pg_signal_backend TO genlab" >&2
if [ "$(psql_ -c "SELECT 1 FROM pg_database WHERE datname = 'genlab'")" != 1 ]; then
    psql_ -c "CREATE DATABASE genlab OWNER genlab" >&2
fi
echo "$URL"
