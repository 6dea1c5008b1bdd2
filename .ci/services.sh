#!/usr/bin/env bash
# Starts the services the tests talk to, when nothing answers on their ports yet:
#   PostgreSQL on 127.0.0.1:5432, trust auth, user `postgres`, database `test`;
#   Redis on 127.0.0.1:6379.
# Called by `make test` (and so by .ci/run). As root it installs what is missing from
# Debian's packages (postgresql, redis-server); as another user it only starts what is
# installed. The database lives in $GPUFLOW_PG_DIR (default /var/tmp/gpuflow-pg), a
# cluster of its own, so the machine's own PostgreSQL configuration is never touched.
# Idempotent: a service already listening is left as it is. Exit 0 once both answer.
set -euo pipefail

PG_DIR="${GPUFLOW_PG_DIR:-/var/tmp/gpuflow-pg}"
PG_PORT=5432
REDIS_PORT=6379

say() { echo "services: $*" >&2; }
fail() { say "$*"; exit 1; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {  # port, name: up to 30 s
    for _ in $(seq 300); do listening "$1" && return 0; sleep 0.1; done
    fail "$2 did not start listening on 127.0.0.1:$1"
}

apt_updated=
apt_install() {
    [ "$(id -u)" = 0 ] || fail "$* not installed, and installing it needs root"
    export DEBIAN_FRONTEND=noninteractive
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

pg_bin() {  # the newest installed PostgreSQL's bin folder
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$dir" ] && echo "$dir"
}

start_postgres() {
    local bin
    bin="$(pg_bin)" || { apt_install postgresql; bin="$(pg_bin)"; }
    # initdb and postgres refuse to run as root: the cluster belongs to `postgres`.
    local run=()
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PG_DIR" postgres
        run=(runuser -u postgres --)
    fi
    if [ ! -s "$PG_DIR/PG_VERSION" ]; then
        mkdir -p "$PG_DIR"
        [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
        "${run[@]}" "$bin/initdb" -D "$PG_DIR" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    # The API tests open a pool per server they start: more connections than the
    # default 100; sockets in the data folder so no system folder is needed.
    "${run[@]}" "$bin/pg_ctl" -D "$PG_DIR" -l "$PG_DIR/server.log" -w start \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=300" \
        >/dev/null || { cat "$PG_DIR/server.log" >&2; fail "PostgreSQL did not start"; }
    wait_for "$PG_PORT" PostgreSQL
}

ensure_test_database() {
    local psql
    psql="$(command -v psql || echo "$(pg_bin)/psql")"
    if ! "$psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
        "$psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -qc 'CREATE DATABASE test'
    fi
}

start_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" \
        --save '' --appendonly no --logfile /var/tmp/gpuflow-redis.log >/dev/null
    wait_for "$REDIS_PORT" Redis
}

listening "$PG_PORT" || start_postgres
ensure_test_database
listening "$REDIS_PORT" || start_redis
say "PostgreSQL on 127.0.0.1:$PG_PORT (database test), Redis on 127.0.0.1:$REDIS_PORT"
